package ike

import (
	"crypto/ecdh"
	"crypto/rand"
	"errors"
	"fmt"
	"math/big"
)

// Diffie-Hellman groups (IANA "Transform Type 4").
const (
	dhMODP2048 = 14 // RFC 3526 §3
	dhECP256   = 19 // RFC 5903
	dhX25519   = 31 // RFC 8031
)

// dhKey is the private half of one key exchange.
type dhKey interface {
	// public is the Key Exchange Data of our KE payload.
	public() []byte
	// shared is g^ir from the peer's Key Exchange Data, in the form
	// RFC 7296 §2.14 feeds to the PRF.
	shared(peer []byte) ([]byte, error)
}

// newDH makes a fresh private key in group.
func newDH(group uint16) (dhKey, error) {
	switch group {
	case dhX25519:
		return newECDH(ecdh.X25519())
	case dhECP256:
		return newECDH(ecdh.P256())
	case dhMODP2048:
		return newMODP()
	}
	return nil, fmt.Errorf("Diffie-Hellman group %d is not supported", group)
}

type ecdhKey struct{ k *ecdh.PrivateKey }

func newECDH(c ecdh.Curve) (dhKey, error) {
	k, err := c.GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	return ecdhKey{k}, nil
}

// public drops the 0x04 prefix of a P-256 point: RFC 5903 §7 puts x | y
// in the KE payload. X25519 keys are already the 32 bytes of RFC 8031.
func (e ecdhKey) public() []byte {
	b := e.k.PublicKey().Bytes()
	if e.k.Curve() == ecdh.P256() {
		return b[1:]
	}
	return b
}

// shared checks the peer's value as RFC 8031 §2 (all-zero X25519 results
// are refused by crypto/ecdh) and RFC 5903 §9 (the point is on the curve)
// ask, and returns the X25519 result or the P-256 x coordinate (RFC 5903 §7).
func (e ecdhKey) shared(peer []byte) ([]byte, error) {
	if e.k.Curve() == ecdh.P256() {
		if len(peer) != 64 {
			return nil, fmt.Errorf("ECP 256 public value of %d bytes, want 64", len(peer))
		}
		peer = append([]byte{4}, peer...)
	}
	pub, err := e.k.Curve().NewPublicKey(peer)
	if err != nil {
		return nil, fmt.Errorf("peer's public value: %w", err)
	}
	return e.k.ECDH(pub)
}

// modp2048 is the 2048-bit MODP group of RFC 3526 §3, generator 2.
var modp2048, _ = new(big.Int).SetString(
	"FFFFFFFFFFFFFFFFC90FDAA22168C234C4C6628B80DC1CD1"+
		"29024E088A67CC74020BBEA63B139B22514A08798E3404DD"+
		"EF9519B3CD3A431B302B0A6DF25F14374FE1356D6D51C245"+
		"E485B576625E7EC6F44C42E9A637ED6B0BFF5CB6F406B7ED"+
		"EE386BFB5A899FA5AE9F24117C4B1FE649286651ECE45B3D"+
		"C2007CB8A163BF0598DA48361C55D39A69163FA8FD24CF5F"+
		"83655D23DCA3AD961C62F356208552BB9ED529077096966D"+
		"670C354E4ABC9804F1746C08CA18217C32905E462E36CE3B"+
		"E39E772C180E86039B2783A2EC07A28FB5C55DF06F4C52C9"+
		"DE2BCBF6955817183995497CEA956AE515D2261898FA0510"+
		"15728E5A8AACAA68FFFFFFFFFFFFFFFF", 16)

const modpLen = 256

// modpExpBits is the private exponent size: twice the group's 112-bit
// strength with room to spare (RFC 3526 §8 gives 320 bits for it).
const modpExpBits = 320

type modpKey struct{ x *big.Int }

func newMODP() (dhKey, error) {
	b := make([]byte, modpExpBits/8)
	if _, err := rand.Read(b); err != nil {
		return nil, err
	}
	return modpKey{new(big.Int).SetBytes(b)}, nil
}

func (k modpKey) public() []byte {
	return new(big.Int).Exp(big.NewInt(2), k.x, modp2048).FillBytes(make([]byte, modpLen))
}

// shared refuses the degenerate values 0, 1 and p-1 and above (RFC 6989
// §2.1) and pads g^ir to the length of the modulus (RFC 7296 §2.14).
func (k modpKey) shared(peer []byte) ([]byte, error) {
	if len(peer) != modpLen {
		return nil, fmt.Errorf("MODP 2048 public value of %d bytes, want %d", len(peer), modpLen)
	}
	y := new(big.Int).SetBytes(peer)
	pMinus1 := new(big.Int).Sub(modp2048, big.NewInt(1))
	if y.Cmp(big.NewInt(1)) <= 0 || y.Cmp(pMinus1) >= 0 {
		return nil, errors.New("peer's MODP 2048 public value is degenerate")
	}
	return new(big.Int).Exp(y, k.x, modp2048).FillBytes(make([]byte, modpLen)), nil
}
