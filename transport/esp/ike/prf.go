package ike

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
)

// prfLen is the output and preferred key size of PRF_HMAC_SHA2_256, the
// only PRF the engine negotiates (RFC 4868 §2.1.2).
const prfLen = sha256.Size

// pskPad is the key pad of PSK authentication (RFC 7296 §2.15).
const pskPad = "Key Pad for IKEv2"

// prf is PRF_HMAC_SHA2_256 (RFC 4868): HMAC-SHA-256 of the concatenated
// data under key.
func prf(key []byte, data ...[]byte) []byte {
	h := hmac.New(sha256.New, key)
	for _, d := range data {
		h.Write(d)
	}
	return h.Sum(nil)
}

// prfPlus is prf+ (RFC 7296 §2.13): T1 | T2 | ... cut to n bytes, where
// Ti = prf(K, T(i-1) | S | i). It panics if n needs more than 255 blocks,
// which no key this package derives does.
func prfPlus(key, seed []byte, n int) []byte {
	if n > 255*prfLen {
		panic("ike: prf+ asked for more than 255 blocks")
	}
	out := make([]byte, 0, n+prfLen)
	var t []byte
	for i := byte(1); len(out) < n; i++ {
		t = prf(key, t, seed, []byte{i})
		out = append(out, t...)
	}
	return out[:n]
}

// ikeKeys are the keys of an IKE SA (RFC 7296 §2.14).
type ikeKeys struct {
	d, ai, ar, ei, er, pi, pr []byte
}

// skeyseed is SKEYSEED of a new IKE SA: prf(Ni | Nr, g^ir) (§2.14), or on an
// IKE SA rekey prf(SK_d of the old SA, g^ir | Ni | Nr) (§2.18).
func skeyseed(oldSKd, shared, ni, nr []byte) []byte {
	if oldSKd != nil {
		return prf(oldSKd, shared, ni, nr)
	}
	return prf(append(clone(ni), nr...), shared)
}

// deriveIKEKeys is {SK_d | SK_ai | SK_ar | SK_ei | SK_er | SK_pi | SK_pr}
// = prf+(SKEYSEED, Ni | Nr | SPIi | SPIr) (§2.14).
func deriveIKEKeys(s ikeSuite, seed, ni, nr []byte, spiI, spiR uint64) ikeKeys {
	ilen, elen := s.integKeyLen(), s.encrKeyLen()
	salt := append(append(clone(ni), nr...), make([]byte, 16)...)
	binary.BigEndian.PutUint64(salt[len(salt)-16:], spiI)
	binary.BigEndian.PutUint64(salt[len(salt)-8:], spiR)
	km := prfPlus(seed, salt, 3*prfLen+2*ilen+2*elen)
	take := func(n int) []byte {
		k := km[:n:n]
		km = km[n:]
		return k
	}
	var k ikeKeys
	k.d = take(prfLen)
	k.ai, k.ar = take(ilen), take(ilen)
	k.ei, k.er = take(elen), take(elen)
	k.pi, k.pr = take(prfLen), take(prfLen)
	return k
}

// pskAuth is the AUTH payload data of PSK authentication (§2.15):
// prf(prf(PSK, "Key Pad for IKEv2"), <SignedOctets>), where SignedOctets
// are the signer's IKE_SA_INIT message, the other side's nonce and
// prf(SK_px, RestOfIDPayload) of the signer's ID.
func pskAuth(psk, initMsg, peerNonce, skp []byte, id *idPayload) []byte {
	return prf(prf(psk, []byte(pskPad)), initMsg, peerNonce, prf(skp, id.appendBody(nil)))
}

// childKeys splits KEYMAT = prf+(SK_d, Ni | Nr) (§2.17; no PFS) into the
// keys of each direction: those from the exchange's initiator to its
// responder come first, the encryption key ahead of the integrity key.
func childKeys(t Transform, skd, ni, nr []byte) (fromInitiator, fromResponder Keys) {
	elen, ilen := t.KeyBits/8, 0
	if t.Encr == EncrAESGCM16 {
		elen += 4 // salt, RFC 4106 §8.1
	}
	if t.Integ == IntegHMACSHA256_128 {
		ilen = 32
	}
	seed := append(clone(ni), nr...)
	km := prfPlus(skd, seed, 2*(elen+ilen))
	take := func(n int) []byte {
		if n == 0 {
			return nil
		}
		k := km[:n:n]
		km = km[n:]
		return k
	}
	fromInitiator = Keys{Encr: take(elen), Integ: take(ilen)}
	fromResponder = Keys{Encr: take(elen), Integ: take(ilen)}
	return fromInitiator, fromResponder
}
