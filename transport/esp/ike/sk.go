package ike

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
)

// errIntegrity is an SK payload whose ICV does not verify.
var errIntegrity = errors.New("integrity check failed")

// skCipher protects the SK payloads of one direction of an IKE SA
// (RFC 7296 §3.14).
type skCipher interface {
	// seal appends IV, ciphertext and ICV of plain to b, which holds the
	// message up to the end of the SK payload header with its final
	// lengths.
	seal(b, plain []byte) []byte
	// open returns the plaintext of the SK payload body that ends msg,
	// whose preceding bytes are msg[:len(msg)-len(body)].
	open(msg, body []byte) ([]byte, error)
	// overhead is the bytes of IV and ICV around the ciphertext.
	overhead() int
	// padTo is the block size the plaintext is padded to.
	padTo() int
}

// newSKCipher returns the SK cipher of suite s with encryption key ek
// (with its salt for AES-GCM) and integrity key ik.
func newSKCipher(s ikeSuite, ek, ik []byte) (skCipher, error) {
	if s.encr == EncrAESGCM16 {
		n := len(ek) - 4
		block, err := aes.NewCipher(ek[:n])
		if err != nil {
			return nil, err
		}
		aead, err := cipher.NewGCM(block)
		if err != nil {
			return nil, err
		}
		return &gcmSK{aead: aead, salt: [4]byte(ek[n:])}, nil
	}
	block, err := aes.NewCipher(ek)
	if err != nil {
		return nil, err
	}
	return &cbcSK{block: block, integ: ik}, nil
}

// gcmSK is AES-GCM with a 16-byte ICV in IKEv2 (RFC 5282): nonce = salt |
// 8-byte IV, associated data = everything before the IV.
type gcmSK struct {
	aead cipher.AEAD
	salt [4]byte
	// iv counts the messages sealed, so that no IV repeats under a key
	// (RFC 5282 §3.1).
	iv uint64
}

func (g *gcmSK) overhead() int { return 8 + 16 }
func (g *gcmSK) padTo() int    { return 1 }

func (g *gcmSK) seal(b, plain []byte) []byte {
	aad := clone(b)
	g.iv++
	b = binary.BigEndian.AppendUint64(b, g.iv)
	var nonce [12]byte
	copy(nonce[:], g.salt[:])
	binary.BigEndian.PutUint64(nonce[4:], g.iv)
	return g.aead.Seal(b, nonce[:], plain, aad)
}

func (g *gcmSK) open(msg, body []byte) ([]byte, error) {
	if len(body) < 8+16 {
		return nil, malformed("SK payload of %d bytes, shorter than IV and ICV", len(body))
	}
	var nonce [12]byte
	copy(nonce[:], g.salt[:])
	copy(nonce[4:], body[:8])
	plain, err := g.aead.Open(nil, nonce[:], body[8:], msg[:len(msg)-len(body)])
	if err != nil {
		return nil, errIntegrity
	}
	return plain, nil
}

// cbcSK is AES-CBC with a random IV and HMAC-SHA-256-128 over the whole
// message (RFC 7296 §3.14, RFC 4868).
type cbcSK struct {
	block cipher.Block
	integ []byte
}

func (c *cbcSK) overhead() int { return aes.BlockSize + 16 }
func (c *cbcSK) padTo() int    { return aes.BlockSize }

func (c *cbcSK) seal(b, plain []byte) []byte {
	start := len(b)
	b = append(b, make([]byte, aes.BlockSize+len(plain))...)
	iv := b[start : start+aes.BlockSize]
	if _, err := rand.Read(iv); err != nil {
		panic(fmt.Sprintf("ike: crypto/rand: %v", err)) // never fails on Linux
	}
	cipher.NewCBCEncrypter(c.block, iv).CryptBlocks(b[start+aes.BlockSize:], plain)
	return append(b, c.icv(b)...)
}

func (c *cbcSK) icv(b []byte) []byte {
	return prf(c.integ, b)[:16]
}

func (c *cbcSK) open(msg, body []byte) ([]byte, error) {
	n := len(body) - aes.BlockSize - 16
	if n < aes.BlockSize || n%aes.BlockSize != 0 {
		return nil, malformed("SK payload of %d bytes is not IV, whole blocks and ICV", len(body))
	}
	if !hmac.Equal(c.icv(msg[:len(msg)-16]), msg[len(msg)-16:]) {
		return nil, errIntegrity
	}
	plain := make([]byte, n)
	cipher.NewCBCDecrypter(c.block, body[:aes.BlockSize]).CryptBlocks(plain, body[aes.BlockSize:aes.BlockSize+n])
	return plain, nil
}

// sealMessage encodes m with inner as the payloads of its SK payload.
func sealMessage(m *message, inner []payload, c skCipher) []byte {
	plain := appendPayloads(nil, inner)
	pad := (c.padTo() - (len(plain)+1)%c.padTo()) % c.padTo()
	plain = append(plain, make([]byte, pad)...)
	plain = append(plain, byte(pad))
	skLen := 4 + c.overhead() + len(plain)
	b := m.appendHeader(make([]byte, 0, headerLen+skLen), payloadSK, headerLen+skLen)
	b = append(b, firstKind(inner), 0)
	b = binary.BigEndian.AppendUint16(b, uint16(skLen))
	return c.seal(b, plain)
}

// openSK decrypts the SK payload that ends msg, the wire form of m, and
// replaces m's payloads with those inside. A message whose only payload is
// not SK is refused: after IKE_SA_INIT everything travels encrypted.
func openSK(msg []byte, m *message, c skCipher) error {
	if len(m.payloads) != 1 {
		return malformed("%d payloads outside the SK payload", len(m.payloads))
	}
	sk, ok := m.payloads[0].(*skPayload)
	if !ok {
		return malformed("payload %d where an SK payload belongs", m.payloads[0].kind())
	}
	plain, err := c.open(msg, sk.body)
	if err != nil {
		return err
	}
	if len(plain) == 0 {
		return malformed("SK payload without a pad length")
	}
	pad := int(plain[len(plain)-1])
	if pad+1 > len(plain) {
		return malformed("SK pad length %d in %d bytes", pad, len(plain))
	}
	ps, err := parsePayloads(sk.next, plain[:len(plain)-1-pad])
	if err != nil {
		return err
	}
	m.payloads = ps
	return nil
}
