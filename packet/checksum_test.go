package packet

import (
	"encoding/binary"
	"math/rand/v2"
	"testing"
)

func TestChecksumExamples(t *testing.T) {
	tests := []struct {
		name    string
		b       []byte
		initial uint16
		want    uint16
	}{
		{"empty input sums to the initial value", nil, 0x1234, 0x1234},
		{"RFC 1071 section 3 example sums to ddf2", []byte{0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7}, 0, 0xddf2},
		{"odd trailing byte is padded on the right", []byte{0x12}, 0, 0x1200},
		{"carry wraps around to the low bit", []byte{0xff, 0xff, 0x00, 0x01}, 0, 0x0001},
		{"all ones stays the one's-complement negative zero", []byte{0xff, 0xff, 0xff, 0xff}, 0, 0xffff},
		{"all zeros sums to zero", make([]byte, 64), 0, 0},
		{"initial value takes part in the carry", []byte{0xff, 0xff}, 0x0002, 0x0002},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Checksum(tt.b, tt.initial); got != tt.want {
				t.Errorf("Checksum = %#04x, want %#04x", got, tt.want)
			}
		})
	}
}

func TestChecksumMatchesReferenceOnRandomInput(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 5000 {
		n := r.IntN(2100)
		if i%10 == 0 {
			n = r.IntN(70) // dwell on the short tails of the unrolled loop
		}
		b := make([]byte, n)
		for j := range b {
			b[j] = byte(r.Uint32())
			if i%7 == 0 {
				b[j] = 0xff // long carries
			}
		}
		initial := uint16(r.Uint32())
		want := refSum(append([]byte{byte(initial >> 8), byte(initial)}, b...))
		if got := Checksum(b, initial); got != want {
			t.Fatalf("len %d initial %#04x: Checksum = %#04x, reference %#04x", n, initial, got, want)
		}
	}
}

// TestChecksumWideAndScalarMatchReference covers the vector loop's
// lengths, its boundary with the scalar tail and unaligned starts, and the
// scalar loop alone on the same input.
func TestChecksumWideAndScalarMatchReference(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	buf := make([]byte, 65536+8)
	for _, n := range []int{255, 256, 257, 319, 320, 1448, 1500, 9000, 65535, 65536} {
		for _, fill := range []string{"random", "ones"} {
			for start := range 8 {
				b := buf[start : start+n]
				for j := range b {
					b[j] = byte(r.Uint32())
					if fill == "ones" {
						b[j] = 0xff
					}
				}
				initial := uint16(r.Uint32())
				want := refSum(append([]byte{byte(initial >> 8), byte(initial)}, b...))
				if got := Checksum(b, initial); got != want {
					t.Fatalf("len %d %s start %d: Checksum = %#04x, reference %#04x", n, fill, start, got, want)
				}
				if got := fold(sumScalar(b, uint64(initial))); got != want {
					t.Fatalf("len %d %s start %d: scalar sum = %#04x, reference %#04x", n, fill, start, got, want)
				}
			}
		}
	}
}

// FuzzChecksum checks Checksum, and its scalar loop alone, against the
// reference on any input.
func FuzzChecksum(f *testing.F) {
	f.Add(make([]byte, 300), uint16(0), uint8(0))
	f.Add([]byte{0xff, 0xff, 0xff}, uint16(0xffff), uint8(1))
	f.Fuzz(func(t *testing.T, data []byte, initial uint16, start uint8) {
		b := data[min(int(start%8), len(data)):]
		want := refSum(append([]byte{byte(initial >> 8), byte(initial)}, b...))
		if got := Checksum(b, initial); got != want {
			t.Fatalf("len %d: Checksum = %#04x, reference %#04x", len(b), got, want)
		}
		if got := fold(sumScalar(b, uint64(initial))); got != want {
			t.Fatalf("len %d: scalar sum = %#04x, reference %#04x", len(b), got, want)
		}
	})
}

func TestPseudoHeaderChecksumMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for range 1000 {
		var src, dst [16]byte
		for i := range src {
			src[i], dst[i] = byte(r.Uint32()), byte(r.Uint32())
		}
		proto, n := uint8(r.Uint32()), r.IntN(65536)
		for _, version := range []uint8{4, 6} {
			want := refSum(refPseudoHeader(version, proto, src, dst, n))
			al := 16
			if version == 4 {
				al = 4
			}
			if got := PseudoHeaderChecksum(proto, src[:al], dst[:al], n); got != want {
				t.Fatalf("IPv%d: PseudoHeaderChecksum = %#04x, reference %#04x", version, got, want)
			}
		}
	}
}

func TestUpdateChecksum16Examples(t *testing.T) {
	tests := []struct {
		name           string
		xsum, old, new uint16
		want           uint16
	}{
		// RFC 1624, section 4: equation 3 gives 0x0000, as a recompute
		// does, where equation 2 would give 0xffff.
		{"RFC 1624 section 4 example yields 0x0000", 0xdd2f, 0x5555, 0x3285, 0x0000},
		{"unchanged word keeps the checksum", 0x1234, 0xabcd, 0xabcd, 0x1234},
		{"word rising by one lowers the checksum by one", 0x1234, 0x0001, 0x0002, 0x1233},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := UpdateChecksum16(tt.xsum, tt.old, tt.new); got != tt.want {
				t.Errorf("UpdateChecksum16 = %#04x, want %#04x", got, tt.want)
			}
		})
	}
}

// Random data whose first word is nonzero, like every header this package
// rewrites: there an incremental update must equal a recompute exactly
// (RFC 1624, section 3), also when the new data sums to 0xffff.
func TestUpdateChecksumEqualsRecomputeOnRandomInput(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for i := range 5000 {
		b := make([]byte, 4+2*r.IntN(40))
		for j := range b {
			b[j] = byte(r.Uint32())
		}
		b[0] |= 0x01
		xsum := ^refSum(b)
		off := 2 + 2*r.IntN(len(b)/2-1)
		n := min(len(b)-off, 2*(1+r.IntN(8)))
		old := clone(b[off : off+n])
		new := make([]byte, n)
		for j := range new {
			new[j] = byte(r.Uint32())
		}
		copy(b[off:], new)
		if i%3 == 0 {
			// Make the data sum to 0xffff, the one's-complement zero.
			b[off], b[off+1] = 0, 0
			binary.BigEndian.PutUint16(new, ^refSum(b))
			copy(b[off:], new)
		}
		want := ^refSum(b)
		if got := UpdateChecksum(xsum, old, new); got != want {
			t.Fatalf("data %x, field at %d %x -> %x: UpdateChecksum = %#04x, recompute %#04x", b, off, old, new, got, want)
		}
		if n == 2 {
			if got := UpdateChecksum16(xsum, binary.BigEndian.Uint16(old), binary.BigEndian.Uint16(new)); got != want {
				t.Fatalf("UpdateChecksum16 = %#04x, recompute %#04x", got, want)
			}
		}
	}
}
