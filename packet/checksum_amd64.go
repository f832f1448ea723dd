package packet

import (
	"math"
	"math/bits"

	"golang.org/x/sys/cpu"
)

// bulkMin is the shortest input sumBulk hands to the vector loop: below
// 256 bytes, the call and the final reduction cost more than the loop
// saves. Without AVX2 no input is long enough.
var bulkMin = bulkMinFor(cpu.X86.HasAVX2)

func bulkMinFor(avx2 bool) int {
	if avx2 {
		return 256
	}
	return math.MaxInt
}

// sumBulk adds the longest prefix of b that is a multiple of 64 bytes to
// acc with sumAVX2, where the CPU has AVX2 and b is long enough, and
// returns the rest of b for the scalar loop. It inlines to a compare for a
// short b.
func sumBulk(b []byte, acc uint64) ([]byte, uint64) {
	if len(b) < bulkMin {
		return b, acc
	}
	return sumBulkAVX2(b, acc)
}

// sumBulkAVX2 is sumBulk's vector path. sumAVX2 adds little-endian words:
// the byte-swapped sum of byte-swapped words is the same sum (RFC 1071,
// section 2(B)).
func sumBulkAVX2(b []byte, acc uint64) ([]byte, uint64) {
	n := len(b) &^ 63
	acc, carry := bits.Add64(acc, uint64(bits.ReverseBytes16(fold(sumAVX2(b[:n])))), 0)
	return b[n:], acc + carry
}

// sumAVX2 returns the sum of b, whose length is a multiple of 64 and below
// 2^32, as little-endian 32-bit words without end-around carry: 64 bytes
// at a time, each word widened into a 64-bit accumulator, so no carry is
// lost.
//
//go:noescape
func sumAVX2(b []byte) uint64
