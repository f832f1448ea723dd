package ike

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"math/rand/v2"
	"testing"
)

func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// NIST's IKEv2 KDF sample (SP 800-135, SHA-256), as NSS carries it in
// gtests/common/testvectors/ike-sha256-vectors.h: 8-byte nonces, g^ir,
// SKEYSEED, prf+ output, and SKEYSEED of a rekey with a new g^ir.
const (
	nistNi            = "3f302be1abcb28e1"
	nistNr            = "8c332ee006064c9b"
	nistSPIi          = "40dac39e1e1a8640"
	nistSPIr          = "8619a1cf9a6e4c07"
	nistGir           = "0f4d257d7a58fc4545c7d7a88119eee5d5c9690c5b4c989171d3abbfd99d1d29"
	nistSKEYSEED      = "5f00d1bd2c58ec224b1e6b71fa0f19a1faa7a193952c444411b47c1a9d8ba6fe"
	nistGirNew        = "25f3b12d6f282739256e39bf54eda53b60ffcf379bb7bcc90c27b4c4c578616c"
	nistSKEYSEEDRekey = "2d63f6debc92048b4fef3889c4c99ca67d6496e0fac14a2bca9a2d6566ff2398"
	nistDKM           = "0b137d669b0947d7d026d593f0305ad401ff0c471357d695778a9c7f4b4869ece98aca531" +
		"188d16041b3bb936d2dbb3b4993a6e768a809160de45d0283f273a6cdf6854379e31be72b" +
		"8d3d1fa990cf9c5b015ca9f918a7df6253c958114a09d4e1c19bdcd4db14b29d98db1a74a" +
		"d405c588662c14a04d0d36aa4ab55e90f8986d12d4aad"
)

func TestKeyDerivationMatchesNISTVectors(t *testing.T) {
	ni, nr := unhex(t, nistNi), unhex(t, nistNr)
	seed := skeyseed(nil, unhex(t, nistGir), ni, nr)
	if !bytes.Equal(seed, unhex(t, nistSKEYSEED)) {
		t.Fatalf("SKEYSEED %x, want %s", seed, nistSKEYSEED)
	}
	salt := append(append(append(clone(ni), nr...), unhex(t, nistSPIi)...), unhex(t, nistSPIr)...)
	dkm := prfPlus(seed, salt, 132)
	if !bytes.Equal(dkm, unhex(t, nistDKM)) {
		t.Fatalf("prf+ %x\nwant %s", dkm, nistDKM)
	}
	for _, n := range []int{15, 32} {
		if got := prfPlus(seed, salt, n); !bytes.Equal(got, dkm[:n]) {
			t.Fatalf("prf+ of %d bytes is not the prefix of the longer output", n)
		}
	}
	// The same SKEYSEED through deriveIKEKeys: SK_d is the first 32 bytes.
	k := deriveIKEKeys(ikeSuite{encr: EncrAESCBC, keyBits: 128, integ: IntegHMACSHA256_128}, seed, ni, nr,
		binary.BigEndian.Uint64(unhex(t, nistSPIi)), binary.BigEndian.Uint64(unhex(t, nistSPIr)))
	if !bytes.Equal(k.d, dkm[:32]) || !bytes.Equal(k.ai, dkm[32:64]) || !bytes.Equal(k.ar, dkm[64:96]) ||
		!bytes.Equal(k.ei, dkm[96:112]) || !bytes.Equal(k.er, dkm[112:128]) {
		t.Fatal("SK_d, SK_ai, SK_ar, SK_ei, SK_er are not consecutive slices of prf+")
	}
	rekey := skeyseed(k.d, unhex(t, nistGirNew), ni, nr)
	if !bytes.Equal(rekey, unhex(t, nistSKEYSEEDRekey)) {
		t.Fatalf("SKEYSEED of the rekey %x, want %s", rekey, nistSKEYSEEDRekey)
	}
}

// refPRFPlus is prf+ written out from RFC 7296 §2.13 with HMAC directly.
func refPRFPlus(key, seed []byte, n int) []byte {
	var out, t []byte
	for i := 1; len(out) < n; i++ {
		m := hmac.New(sha256.New, key)
		m.Write(t)
		m.Write(seed)
		m.Write([]byte{byte(i)})
		t = m.Sum(nil)
		out = append(out, t...)
	}
	return out[:n]
}

func TestPRFPlusMatchesReferenceOnRandomInput(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for range 200 {
		key, seed := make([]byte, r.IntN(80)), make([]byte, r.IntN(300))
		for i := range key {
			key[i] = byte(r.Uint32())
		}
		for i := range seed {
			seed[i] = byte(r.Uint32())
		}
		n := 1 + r.IntN(400)
		if got, want := prfPlus(key, seed, n), refPRFPlus(key, seed, n); !bytes.Equal(got, want) {
			t.Fatalf("prf+(%x, %x, %d)\n got %x\nwant %x", key, seed, n, got, want)
		}
	}
}

func TestIKEKeyLengthsPerSuite(t *testing.T) {
	tests := []struct {
		name        string
		suite       ikeSuite
		encr, integ int
	}{
		{"aes128gcm16 keys carry a 4-byte salt and no SK_a", ikeSuite{encr: EncrAESGCM16, keyBits: 128}, 20, 0},
		{"aes256gcm16", ikeSuite{encr: EncrAESGCM16, keyBits: 256}, 36, 0},
		{"aes128-sha256", ikeSuite{encr: EncrAESCBC, keyBits: 128, integ: IntegHMACSHA256_128}, 16, 32},
		{"aes256-sha256", ikeSuite{encr: EncrAESCBC, keyBits: 256, integ: IntegHMACSHA256_128}, 32, 32},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			seed := bytes.Repeat([]byte{7}, 32)
			ni, nr := bytes.Repeat([]byte{1}, 32), bytes.Repeat([]byte{2}, 32)
			k := deriveIKEKeys(tt.suite, seed, ni, nr, 1, 2)
			all := refPRFPlus(seed, append(append(append(clone(ni), nr...), 0, 0, 0, 0, 0, 0, 0, 1), 0, 0, 0, 0, 0, 0, 0, 2), 96+2*tt.encr+2*tt.integ)
			got := bytes.Join([][]byte{k.d, k.ai, k.ar, k.ei, k.er, k.pi, k.pr}, nil)
			if !bytes.Equal(got, all) {
				t.Fatal("the seven keys are not prf+(SKEYSEED, Ni | Nr | SPIi | SPIr) in order")
			}
			if len(k.ei) != tt.encr || len(k.ai) != tt.integ || len(k.d) != 32 || len(k.pi) != 32 {
				t.Fatalf("lengths SK_d %d SK_a %d SK_e %d SK_p %d", len(k.d), len(k.ai), len(k.ei), len(k.pi))
			}
		})
	}
}

func TestChildKeysSplitKEYMATInRFCOrder(t *testing.T) {
	skd, ni, nr := bytes.Repeat([]byte{9}, 32), bytes.Repeat([]byte{1}, 32), bytes.Repeat([]byte{2}, 40)
	tests := []struct {
		name        string
		t           Transform
		encr, integ int
	}{
		{"aes128gcm16: key and salt, no integrity key", Transform{Encr: EncrAESGCM16, KeyBits: 128}, 20, 0},
		{"aes256gcm16", Transform{Encr: EncrAESGCM16, KeyBits: 256}, 36, 0},
		{"aes128-sha256: encryption then integrity key", Transform{Encr: EncrAESCBC, KeyBits: 128, Integ: IntegHMACSHA256_128}, 16, 32},
		{"aes256-sha256", Transform{Encr: EncrAESCBC, KeyBits: 256, Integ: IntegHMACSHA256_128}, 32, 32},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			i, r := childKeys(tt.t, skd, ni, nr)
			km := refPRFPlus(skd, append(clone(ni), nr...), 2*(tt.encr+tt.integ))
			e, a := tt.encr, tt.integ
			if !bytes.Equal(i.Encr, km[:e]) || !bytes.Equal(i.Integ, km[e:e+a]) ||
				!bytes.Equal(r.Encr, km[e+a:2*e+a]) || !bytes.Equal(r.Integ, km[2*e+a:]) {
				t.Fatal("keys are not KEYMAT = encr_i | integ_i | encr_r | integ_r")
			}
			if a == 0 && (i.Integ != nil || r.Integ != nil) {
				t.Fatal("an integrity key for a combined-mode cipher")
			}
		})
	}
}

func TestPSKAuthMatchesRFC7296Formula(t *testing.T) {
	id := &idPayload{id: identity{typ: idFQDN, data: []byte("a.test")}}
	msg, nonce, skp := []byte("the IKE_SA_INIT message"), bytes.Repeat([]byte{5}, 32), bytes.Repeat([]byte{6}, 32)
	mac := func(key []byte, parts ...[]byte) []byte {
		h := hmac.New(sha256.New, key)
		for _, p := range parts {
			h.Write(p)
		}
		return h.Sum(nil)
	}
	rest := append([]byte{idFQDN, 0, 0, 0}, "a.test"...)
	want := mac(mac(psk, []byte("Key Pad for IKEv2")), msg, nonce, mac(skp, rest))
	if got := pskAuth(psk, msg, nonce, skp, id); !bytes.Equal(got, want) {
		t.Fatalf("AUTH %x, want %x", got, want)
	}
}
