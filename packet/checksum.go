package packet

import (
	"encoding/binary"
	"math/bits"
)

// Checksum returns the folded 16-bit one's-complement sum of b (RFC 1071)
// added to initial. It does not complement the result: a checksum field holds
// ^Checksum(data, pseudoHeaderSum), and data that includes a correct checksum
// field sums to 0xffff. An odd trailing byte is padded with a zero byte.
func Checksum(b []byte, initial uint16) uint16 {
	b, acc := sumBulk(b, uint64(initial))
	return fold(sumScalar(b, acc))
}

// sum adds b to acc as big-endian words with end-around carry. Adding 64-bit
// words is equivalent to adding their 16-bit parts because 2^16 ≡ 1 modulo
// 0xffff (RFC 1071, section 2(B)). The bulk of a long b goes through the
// architecture's vector loop, where it has one (sumBulk).
func sum(b []byte, acc uint64) uint64 {
	b, acc = sumBulk(b, acc)
	return sumScalar(b, acc)
}

// sumScalar is sum without the vector loop, for the short inputs (headers,
// addresses) that would never reach it.
func sumScalar(b []byte, acc uint64) uint64 {
	var carry uint64
	for len(b) >= 32 {
		acc, carry = bits.Add64(acc, binary.BigEndian.Uint64(b), carry)
		acc, carry = bits.Add64(acc, binary.BigEndian.Uint64(b[8:]), carry)
		acc, carry = bits.Add64(acc, binary.BigEndian.Uint64(b[16:]), carry)
		acc, carry = bits.Add64(acc, binary.BigEndian.Uint64(b[24:]), carry)
		b = b[32:]
	}
	for len(b) >= 8 {
		acc, carry = bits.Add64(acc, binary.BigEndian.Uint64(b), carry)
		b = b[8:]
	}
	if len(b) >= 4 {
		acc, carry = bits.Add64(acc, uint64(binary.BigEndian.Uint32(b)), carry)
		b = b[4:]
	}
	if len(b) >= 2 {
		acc, carry = bits.Add64(acc, uint64(binary.BigEndian.Uint16(b)), carry)
		b = b[2:]
	}
	if len(b) == 1 {
		acc, carry = bits.Add64(acc, uint64(b[0])<<8, carry)
	}
	// Adding the last carry can itself carry at most once.
	acc, carry = bits.Add64(acc, carry, 0)
	return acc + carry
}

// fold reduces a 64-bit end-around-carry sum to 16 bits. The result is zero
// only when every word added was zero.
func fold(acc uint64) uint16 {
	acc = acc>>32 + acc&0xffffffff
	acc = acc>>32 + acc&0xffffffff
	acc = acc>>16 + acc&0xffff
	acc = acc>>16 + acc&0xffff
	return uint16(acc)
}

// PseudoHeaderChecksum returns the folded sum of the pseudo-header that TCP,
// UDP and ICMPv6 checksums cover: RFC 793 section 3.1 and RFC 768 for IPv4
// (4-byte addresses), RFC 8200 section 8.1 for IPv6 (16-byte addresses).
// length is the upper-layer packet length.
func PseudoHeaderChecksum(proto uint8, src, dst []byte, length int) uint16 {
	acc := sumScalar(src, 0)
	acc = sumScalar(dst, acc)
	return fold(acc + uint64(proto) + uint64(length))
}

// UpdateChecksum returns the checksum field value xsum adjusted for the bytes
// old being replaced by new, using HC' = ~(~HC + ~m + m') (RFC 1624, section
// 3, equation 3). old and new have the same even length and start at an even
// offset from the start of the checksummed data.
func UpdateChecksum(xsum uint16, old, new []byte) uint16 {
	acc := uint64(^xsum)
	for i := 0; i+1 < len(old) && i+1 < len(new); i += 2 {
		acc += uint64(^binary.BigEndian.Uint16(old[i:]))
		acc += uint64(binary.BigEndian.Uint16(new[i:]))
	}
	return ^fold(acc)
}

// UpdateChecksum16 is UpdateChecksum for one 16-bit word at an even offset.
func UpdateChecksum16(xsum, old, new uint16) uint16 {
	return ^fold(uint64(^xsum) + uint64(^old) + uint64(new))
}
