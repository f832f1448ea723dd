package esp

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/binary"
	"hash"
	"sync"
)

// suite is the protection of one direction of an SA (RFC 4303 §3.3.2): how
// its IV is made, how the ciphertext is encrypted and the ICV computed.
//
// encrypt and decrypt work in place on the ESP packet b[start:], where
// len(b) is the end of its ICV and the header, IV and ciphertext are in
// place. They assemble the nonce, AAD and MAC in s and allocate nothing.
// Callers check lengths; hi is the high half of the 64-bit sequence
// number, used only with esn.
type suite interface {
	ivLen() int
	// blockLen is the unit the cipher works in: the ciphertext is a whole
	// number of them (1 for a stream mode).
	blockLen() int
	// putIV writes the IV of the packet with sequence number seq.
	putIV(iv []byte, seq uint64)
	encrypt(b []byte, start int, hi uint32, esn bool, s *scratch)
	// decrypt verifies the ICV and, when it verifies, decrypts; it reports
	// whether the ICV verified.
	decrypt(b []byte, start int, hi uint32, esn bool, s *scratch) bool
}

// gcm is AES-GCM with a 16-byte ICV in ESP (RFC 4106). An AEAD is safe
// for concurrent use.
type gcm struct {
	aead cipher.AEAD
	salt [4]byte
}

// gcmSaltLen is the salt that follows the AES key in the key material
// (RFC 4106 §8.1).
const gcmSaltLen = 4

// newGCM takes key material of an AES key followed by the 4-byte salt.
func newGCM(material []byte) (*gcm, error) {
	key, salt := material[:len(material)-gcmSaltLen], material[len(material)-gcmSaltLen:]
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	g := &gcm{aead: aead}
	copy(g.salt[:], salt)
	return g, nil
}

func (*gcm) ivLen() int    { return gcmIVLen }
func (*gcm) blockLen() int { return 1 }

// putIV uses the sequence number as the IV: RFC 4106 §3.1 asks only that an
// IV never repeat under one key, and the SA never reuses a sequence number.
func (*gcm) putIV(iv []byte, seq uint64) { binary.BigEndian.PutUint64(iv, seq) }

func (g *gcm) encrypt(b []byte, start int, hi uint32, esn bool, s *scratch) {
	nonce, aad := g.prepare(b, start, hi, esn, s)
	pt := b[start+espHeaderLen+gcmIVLen : len(b)-icvLen]
	g.aead.Seal(pt[:0], nonce, pt, aad)
}

func (g *gcm) decrypt(b []byte, start int, hi uint32, esn bool, s *scratch) bool {
	nonce, aad := g.prepare(b, start, hi, esn, s)
	ct := b[start+espHeaderLen+gcmIVLen:]
	_, err := g.aead.Open(ct[:0], nonce, ct, aad)
	return err == nil
}

// prepare writes the nonce, salt and IV (RFC 4106 §4), into s and returns
// it with the AAD (§5): SPI and sequence number as they stand in the
// packet, or with ESN the SPI, high and low halves, assembled in s too.
func (g *gcm) prepare(b []byte, start int, hi uint32, esn bool, s *scratch) (nonce, aad []byte) {
	nonce = s[:12]
	copy(nonce, g.salt[:])
	copy(nonce[gcmSaltLen:], b[start+espHeaderLen:start+espHeaderLen+gcmIVLen])
	if !esn {
		return nonce, b[start : start+espHeaderLen]
	}
	aad = s[12:24]
	copy(aad[0:4], b[start:start+4])
	binary.BigEndian.PutUint32(aad[4:8], hi)
	copy(aad[8:12], b[start+4:start+8])
	return nonce, aad
}

// cbc is AES-CBC (RFC 3602) with HMAC-SHA-256-128 (RFC 4868). The block
// ciphers are safe for concurrent use; HMAC states are not, so each call
// takes one from a pool.
type cbc struct {
	block cipher.Block
	ivGen cipher.Block // outbound only: the key the IVs are made with
	macs  sync.Pool    // hash.Hash: HMAC-SHA-256 under the integrity key
}

// hmacKeyLen is the integrity key of HMAC-SHA-256-128 (RFC 4868 §2.1.1).
const hmacKeyLen = sha256.Size

// newCBC takes the AES key and the HMAC key; an outbound SA also gets a
// random key for its IVs.
func newCBC(encKey, integKey []byte, outbound bool) (*cbc, error) {
	block, err := aes.NewCipher(encKey)
	if err != nil {
		return nil, err
	}
	c := &cbc{block: block}
	if outbound {
		var k [16]byte
		rand.Read(k[:])
		if c.ivGen, err = aes.NewCipher(k[:]); err != nil {
			return nil, err
		}
	}
	integ := append([]byte(nil), integKey...)
	c.macs.New = func() any { return hmac.New(sha256.New, integ) }
	return c, nil
}

func (*cbc) ivLen() int    { return cbcIVLen }
func (*cbc) blockLen() int { return aes.BlockSize }

// putIV makes an unpredictable IV, as CBC needs (RFC 3602 §3), without a
// system call per packet: the sequence number encrypted under a random key
// of the SA's own (the first method of NIST SP 800-38A Appendix C, with a
// key of its own rather than the encryption key). AES is a pseudorandom
// permutation and a sequence number is never reused, so the IVs are
// distinct and, to anyone without that key, look random.
func (c *cbc) putIV(iv []byte, seq uint64) {
	clear(iv[:8])
	binary.BigEndian.PutUint64(iv[8:], seq)
	c.ivGen.Encrypt(iv, iv)
}

func (c *cbc) encrypt(b []byte, start int, hi uint32, esn bool, s *scratch) {
	icvAt := len(b) - icvLen
	iv := b[start+espHeaderLen : start+espHeaderLen+cbcIVLen]
	cbcEncrypt(c.block, iv, b[start+espHeaderLen+cbcIVLen:icvAt])
	copy(b[icvAt:], c.icv(b, start, hi, esn, s))
}

// decrypt verifies before it decrypts (RFC 4303 §3.4.4.1), so that a
// forged packet costs a MAC but never a decryption.
func (c *cbc) decrypt(b []byte, start int, hi uint32, esn bool, s *scratch) bool {
	icvAt := len(b) - icvLen
	var got [icvLen]byte
	copy(got[:], b[icvAt:])
	if subtle.ConstantTimeCompare(c.icv(b, start, hi, esn, s), got[:]) != 1 {
		return false
	}
	iv := b[start+espHeaderLen : start+espHeaderLen+cbcIVLen]
	cbcDecrypt(c.block, iv, b[start+espHeaderLen+cbcIVLen:icvAt])
	return true
}

// icv computes the ICV of the packet before its ICV field, in s. With ESN
// the high 32 bits of the sequence number are appended for the computation
// only (RFC 4303 §2.2.1), in the ICV field, which the caller then
// overwrites or has saved.
func (c *cbc) icv(b []byte, start int, hi uint32, esn bool, s *scratch) []byte {
	end := len(b) - icvLen
	if esn {
		binary.BigEndian.PutUint32(b[end:], hi)
		end += 4
	}
	return c.sum(b[start:end], s[:])
}

// sum is HMAC-SHA-256-128 of msg: the HMAC truncated to its first 128 bits
// (RFC 4868 §2.3), computed in scratch, which has room for all 256.
func (c *cbc) sum(msg, scratch []byte) []byte {
	h := c.macs.Get().(hash.Hash)
	h.Reset()
	h.Write(msg)
	s := h.Sum(scratch[:0])
	c.macs.Put(h)
	return s[:icvLen]
}

// cbcEncrypt encrypts the whole blocks of p in place in CBC mode.
func cbcEncrypt(block cipher.Block, iv, p []byte) {
	prev := iv
	for i := 0; i < len(p); i += aes.BlockSize {
		x := p[i : i+aes.BlockSize]
		subtle.XORBytes(x, x, prev)
		block.Encrypt(x, x)
		prev = x
	}
}

// cbcDecrypt decrypts the whole blocks of p in place in CBC mode, last
// block first, so that each block's predecessor is still ciphertext when it
// is needed and nothing is copied aside.
func cbcDecrypt(block cipher.Block, iv, p []byte) {
	for i := len(p) - aes.BlockSize; i >= 0; i -= aes.BlockSize {
		x := p[i : i+aes.BlockSize]
		block.Decrypt(x, x)
		prev := iv
		if i > 0 {
			prev = p[i-aes.BlockSize : i]
		}
		subtle.XORBytes(x, x, prev)
	}
}
