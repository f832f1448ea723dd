package ike

import "testing"

// BenchmarkDH measures one side of a key exchange in each group: making a
// key, its public value, and the shared secret.
func BenchmarkDH(b *testing.B) {
	for _, g := range []uint16{dhX25519, dhECP256, dhMODP2048} {
		b.Run(dhName(g), func(b *testing.B) {
			peer, err := newDH(g)
			if err != nil {
				b.Fatal(err)
			}
			pub := peer.public()
			b.ReportAllocs()
			for b.Loop() {
				k, err := newDH(g)
				if err != nil {
					b.Fatal(err)
				}
				k.public()
				if _, err := k.shared(pub); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
