package packet

import (
	"encoding/binary"
	"net/netip"
	"testing"
)

// refSum is the obviously-correct one's-complement sum of RFC 1071: 16-bit
// big-endian words, an odd last byte padded with zero, end-around carry after
// every addition.
func refSum(b []byte) uint16 {
	var s uint32
	for i := 0; i < len(b); i += 2 {
		w := uint32(b[i]) << 8
		if i+1 < len(b) {
			w |= uint32(b[i+1])
		}
		s += w
		if s > 0xffff {
			s -= 0xffff
		}
	}
	return uint16(s)
}

// refPseudoHeader returns the pseudo-header bytes of RFC 768/793 (IPv4) or
// RFC 8200, section 8.1 (IPv6).
func refPseudoHeader(version, proto uint8, src, dst [16]byte, n int) []byte {
	if version == 4 {
		ph := append(append([]byte{}, src[:4]...), dst[:4]...)
		return append(ph, 0, proto, byte(n>>8), byte(n))
	}
	ph := append(append([]byte{}, src[:]...), dst[:]...)
	return append(ph, byte(n>>24), byte(n>>16), byte(n>>8), byte(n), 0, 0, 0, proto)
}

// refL4Checksum returns what the upper-layer checksum field of the whole,
// unfragmented packet b should hold, computed from scratch over a copy with
// the field zeroed. ok is false for protocols without one.
func refL4Checksum(b []byte, p *Parsed) (c uint16, off int, ok bool) {
	l4 := b[p.IPHeaderLen:p.Length]
	var pseudo bool
	switch {
	case p.Proto == ProtoTCP:
		off, pseudo = 16, true
	case p.Proto == ProtoUDP:
		off, pseudo = 6, true
		l4 = l4[:binary.BigEndian.Uint16(l4[4:])]
	case p.Proto == ProtoICMPv4 && p.Version == 4:
		off = 2
	case p.Proto == ProtoICMPv6 && p.Version == 6:
		off, pseudo = 2, true
	default:
		return 0, 0, false
	}
	var buf []byte
	if pseudo {
		buf = refPseudoHeader(p.Version, p.Proto, p.Src, p.Dst, len(l4))
	}
	start := len(buf)
	buf = append(buf, l4...)
	buf[start+off], buf[start+off+1] = 0, 0
	c = ^refSum(buf)
	if c == 0 && p.Proto == ProtoUDP {
		c = 0xffff
	}
	return c, p.IPHeaderLen + off, true
}

// checkChecksums fails t unless every checksum of the unfragmented packet b
// equals a full recompute by the reference.
func checkChecksums(t testing.TB, b []byte) {
	t.Helper()
	var p Parsed
	if r := p.Decode(b); r != DropNone {
		t.Fatalf("Decode = %v, want none", r)
	}
	if p.IsFragment() {
		return
	}
	want, off, ok := refL4Checksum(b, &p)
	if !ok {
		return
	}
	got := binary.BigEndian.Uint16(b[off:])
	if p.Proto == ProtoUDP && got == 0 {
		return
	}
	if got != want {
		t.Errorf("upper-layer checksum = %#04x, want %#04x", got, want)
	}
}

// fixChecksums sets every checksum of b from the reference, as a sender
// would; it leaves a zero UDP checksum zero. It returns false when b does not
// decode once its IPv4 header checksum is set.
func fixChecksums(b []byte) bool {
	if len(b) >= IPv4MinHeaderLen && b[0]>>4 == 4 {
		hl := int(b[0]&0x0f) * 4
		if hl >= IPv4MinHeaderLen && hl <= len(b) {
			b[10], b[11] = 0, 0
			binary.BigEndian.PutUint16(b[10:], ^refSum(b[:hl]))
		}
	}
	var p Parsed
	if p.Decode(b) != DropNone {
		return false
	}
	if p.IsFragment() {
		// A first fragment's checksum covers data in other fragments, so
		// any value may be right except 0xffff: only all-zero data sums to
		// that, and the upper-layer header is not all zeros. RFC 1624
		// updates turn it into 0x0000, the other zero, so a round trip
		// would not restore it.
		if c, _ := p.checksumField(); c >= 0 && b[c] == 0xff && b[c+1] == 0xff {
			b[c], b[c+1] = 0, 0
		}
		return true
	}
	if c, off, ok := refL4Checksum(b, &p); ok {
		if p.Proto == ProtoUDP && binary.BigEndian.Uint16(b[off:]) == 0 {
			return true
		}
		binary.BigEndian.PutUint16(b[off:], c)
	}
	return true
}

// v4 describes an IPv4 header for building test packets.
type v4 struct {
	src, dst string
	proto    uint8
	ttl      uint8
	id       uint16
	frag     uint16 // flags and offset, as on the wire
	options  []byte // a multiple of 4 bytes
}

// build returns the IPv4 packet with l4 as its payload and all checksums set
// (the upper-layer one only if the packet decodes).
func (h v4) build(l4 []byte) []byte {
	hl := IPv4MinHeaderLen + len(h.options)
	b := make([]byte, hl+len(l4))
	b[0] = 0x40 | byte(hl/4)
	binary.BigEndian.PutUint16(b[2:], uint16(len(b)))
	binary.BigEndian.PutUint16(b[4:], h.id)
	binary.BigEndian.PutUint16(b[6:], h.frag)
	b[8] = h.ttl
	if b[8] == 0 {
		b[8] = 64
	}
	b[9] = h.proto
	a := netip.MustParseAddr(h.src).As4()
	copy(b[12:], a[:])
	a = netip.MustParseAddr(h.dst).As4()
	copy(b[16:], a[:])
	copy(b[20:], h.options)
	copy(b[hl:], l4)
	fixChecksums(b)
	return b
}

// v6 describes an IPv6 header for building test packets. ext is the raw
// extension header chain; next is the header after the fixed one.
type v6 struct {
	src, dst string
	next     uint8
	hops     uint8
	ext      []byte
}

// build returns the IPv6 packet with l4 after the extension headers and all
// checksums set (the upper-layer one only if the packet decodes).
func (h v6) build(l4 []byte) []byte {
	b := make([]byte, IPv6HeaderLen, IPv6HeaderLen+len(h.ext)+len(l4))
	b[0] = 0x60
	binary.BigEndian.PutUint16(b[4:], uint16(len(h.ext)+len(l4)))
	b[6] = h.next
	b[7] = h.hops
	if b[7] == 0 {
		b[7] = 64
	}
	a := netip.MustParseAddr(h.src).As16()
	copy(b[8:], a[:])
	a = netip.MustParseAddr(h.dst).As16()
	copy(b[24:], a[:])
	b = append(append(b, h.ext...), l4...)
	fixChecksums(b)
	return b
}

// ext6 returns an 8-byte IPv6 extension header of a type whose length is in
// 8-byte units (Hop-by-Hop, Routing, Destination Options), padded with PadN.
func ext6(next uint8) []byte { return []byte{next, 0, 1, 4, 0, 0, 0, 0} }

// routing6 returns a Type 0-shaped Routing header with segsLeft segments left.
func routing6(next, segsLeft uint8) []byte { return []byte{next, 0, 0, segsLeft, 0, 0, 0, 0} }

// frag6 returns an IPv6 Fragment header.
func frag6(next uint8, off uint16, more bool, id uint32) []byte {
	b := make([]byte, 8)
	b[0] = next
	fo := off << 3
	if more {
		fo |= 1
	}
	binary.BigEndian.PutUint16(b[2:], fo)
	binary.BigEndian.PutUint32(b[4:], id)
	return b
}

func cat(parts ...[]byte) []byte {
	var b []byte
	for _, p := range parts {
		b = append(b, p...)
	}
	return b
}

// tcp returns a TCP segment with the checksum left for build to fill.
func tcp(sport, dport uint16, flags uint8, opts []byte, payload []byte) []byte {
	hl := TCPMinHeaderLen + len(opts)
	b := make([]byte, hl+len(payload))
	binary.BigEndian.PutUint16(b[0:], sport)
	binary.BigEndian.PutUint16(b[2:], dport)
	binary.BigEndian.PutUint32(b[4:], 0x01020304)
	binary.BigEndian.PutUint32(b[8:], 0x0a0b0c0d)
	b[12] = byte(hl/4) << 4
	b[13] = flags
	binary.BigEndian.PutUint16(b[14:], 65535)
	copy(b[20:], opts)
	copy(b[hl:], payload)
	return b
}

// udp returns a UDP datagram; checksum 1 asks build to fill it, 0 leaves none.
func udp(sport, dport uint16, checksum uint16, payload []byte) []byte {
	b := make([]byte, UDPHeaderLen+len(payload))
	binary.BigEndian.PutUint16(b[0:], sport)
	binary.BigEndian.PutUint16(b[2:], dport)
	binary.BigEndian.PutUint16(b[4:], uint16(len(b)))
	binary.BigEndian.PutUint16(b[6:], checksum)
	copy(b[8:], payload)
	return b
}

// icmp returns an ICMP or ICMPv6 message with the checksum left for build.
func icmp(typ, code uint8, rest uint32, payload []byte) []byte {
	b := make([]byte, ICMPHeaderLen+len(payload))
	b[0], b[1] = typ, code
	binary.BigEndian.PutUint32(b[4:], rest)
	copy(b[8:], payload)
	return b
}

func addr16(s string) [16]byte {
	a := netip.MustParseAddr(s)
	if a.Is4() {
		var r [16]byte
		v := a.As4()
		copy(r[:], v[:])
		return r
	}
	return a.As16()
}

func clone(b []byte) []byte { return append([]byte(nil), b...) }

var payload = []byte("snorkel test payload, odd length")
