package ike

import (
	"bytes"
	"crypto/ecdh"
	"math/big"
	"testing"
)

func TestDHAgreesInEachGroup(t *testing.T) {
	for _, g := range []uint16{dhX25519, dhECP256, dhMODP2048} {
		t.Run(dhName(g), func(t *testing.T) {
			a, err := newDH(g)
			if err != nil {
				t.Fatal(err)
			}
			b, err := newDH(g)
			if err != nil {
				t.Fatal(err)
			}
			want := map[uint16]int{dhX25519: 32, dhECP256: 64, dhMODP2048: 256}[g]
			if len(a.public()) != want {
				t.Fatalf("public value of %d bytes, want %d", len(a.public()), want)
			}
			ab, err := a.shared(b.public())
			if err != nil {
				t.Fatal(err)
			}
			ba, err := b.shared(a.public())
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(ab, ba) {
				t.Fatal("the two sides derive different secrets")
			}
		})
	}
	if _, err := newDH(15); err == nil {
		t.Fatal("group 15 accepted")
	}
}

// RFC 5903 §8.1: the 256-bit random ECP group exchange, with the KE
// payload holding x | y and g^ir being the x coordinate alone.
func TestECP256MatchesRFC5903(t *testing.T) {
	i, err := ecdh.P256().NewPrivateKey(unhex(t, "C88F01F510D9AC3F70A292DAA2316DE544E9AAB8AFE84049C62A9C57862D1433"))
	if err != nil {
		t.Fatal(err)
	}
	k := ecdhKey{i}
	gi := "DAD0B65394221CF9B051E1FECA5787D098DFE637FC90B9EF945D0C3772581180" + "5271A0461CDB8252D61F1C456FA3E59AB1F45B33ACCF5F58389E0577B8990BB3"
	if !bytes.Equal(k.public(), unhex(t, gi)) {
		t.Fatalf("KE data %X, want gix | giy", k.public())
	}
	gr := "D12DFB5289C8D4F81208B70270398C342296970A0BCCB74C736FC7554494BF63" + "56FBF3CA366CC23E8157854C13C58D6AAC23F046ADA30F8353E74F33039872AB"
	s, err := k.shared(unhex(t, gr))
	if err != nil {
		t.Fatal(err)
	}
	if want := unhex(t, "D6840F6B42F6EDAFD13116E0E12565202FEF8E9ECE7DCE03812464D04B9442DE"); !bytes.Equal(s, want) {
		t.Fatalf("g^ir %X, want girx", s)
	}
}

// RFC 7748 §6.1 through the KE form of RFC 8031.
func TestX25519MatchesRFC7748(t *testing.T) {
	a, err := ecdh.X25519().NewPrivateKey(unhex(t, "77076d0a7318a57d3c16c17251b26645df4c2f87ebc0992ab177fba51db92c2a"))
	if err != nil {
		t.Fatal(err)
	}
	k := ecdhKey{a}
	if !bytes.Equal(k.public(), unhex(t, "8520f0098930a754748b7ddcb43ef75a0dbf3a0d26381af4eba4a98eaa9b4e6a")) {
		t.Fatalf("public %x", k.public())
	}
	s, err := k.shared(unhex(t, "de9edb7d7b7dc1b4d35b61c2ece435373f8343c85b78674dadfc7e146f882b4f"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(s, unhex(t, "4a5d9d5ba4ce2de1728e3bf480350f25e07e21c947d19e3376f09b3c1e161742")) {
		t.Fatalf("shared %x", s)
	}
}

// The MODP prime is RFC 3526's if it is a safe prime of 2048 bits: a
// mistyped digit would all but surely break that.
func TestMODP2048IsASafePrime(t *testing.T) {
	if modp2048.BitLen() != 2048 || !modp2048.ProbablyPrime(20) {
		t.Fatal("the MODP 2048 modulus is not a 2048-bit prime")
	}
	q := new(big.Int).Rsh(modp2048, 1)
	if !q.ProbablyPrime(20) {
		t.Fatal("(p-1)/2 is not prime")
	}
	one := modpKey{big.NewInt(1)}
	if want := append(make([]byte, modpLen-1), 2); !bytes.Equal(one.public(), want) {
		t.Fatal("g^1 is not 2, padded to 256 bytes")
	}
}

func TestDHRefusesBadPublicValues(t *testing.T) {
	pMinus1 := new(big.Int).Sub(modp2048, big.NewInt(1)).FillBytes(make([]byte, modpLen))
	tests := []struct {
		name  string
		group uint16
		peer  []byte
	}{
		{"X25519 all-zero point (RFC 8031 §2)", dhX25519, make([]byte, 32)},
		{"X25519 short value", dhX25519, make([]byte, 31)},
		{"ECP 256 point off the curve", dhECP256, bytes.Repeat([]byte{1}, 64)},
		{"ECP 256 with the 0x04 prefix", dhECP256, append([]byte{4}, make([]byte, 64)...)},
		{"MODP 1", dhMODP2048, append(make([]byte, modpLen-1), 1)},
		{"MODP p-1", dhMODP2048, pMinus1},
		{"MODP p", dhMODP2048, modp2048.FillBytes(make([]byte, modpLen))},
		{"MODP short value", dhMODP2048, []byte{5}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k, err := newDH(tt.group)
			if err != nil {
				t.Fatal(err)
			}
			if s, err := k.shared(tt.peer); err == nil {
				t.Fatalf("accepted, secret %x", s)
			}
		})
	}
}
