package packet

import (
	"encoding/binary"
	"math/bits"
)

// The rewrite functions change one address or port of the packet b in place,
// p being b's Decode or DecodeInner result, and keep every checksum that
// covers the field correct by incremental update (RFC 1624): the IPv4 header
// checksum, and the TCP, UDP or ICMPv6 checksum through the pseudo-header. A
// UDP checksum of zero (none sent) stays zero. They update p to match.
//
// A non-first fragment has no upper-layer header; only its IP header changes.
// A first fragment's upper-layer checksum covers the whole datagram, so the
// incremental update is right for it, provided every fragment is rewritten
// alike. A checksum field that an ICMP error did not quote is skipped.
// Protocols other than TCP, UDP, ICMP and ICMPv6 are left as they are, and so
// is the upper-layer checksum when the destination of an IPv6 packet with a
// Routing header changes, since that checksum covers the final destination
// instead (RFC 8200, section 8.1).

// IPv4 and IPv6 address offsets.
const (
	ipv4SrcOffset = 12
	ipv4DstOffset = 16
	ipv6SrcOffset = 8
	ipv6DstOffset = 24
)

// SetSrcAddr stores a as the source address of b. For IPv4 the address is in
// the first 4 bytes of a.
func SetSrcAddr(b []byte, p *Parsed, a [16]byte) {
	set(b, p, p.srcOffset(), &a, -1, 0)
}

// SetDstAddr stores a as the destination address of b. For IPv4 the address
// is in the first 4 bytes of a.
func SetDstAddr(b []byte, p *Parsed, a [16]byte) {
	set(b, p, p.dstOffset(), &a, -1, 0)
}

// SetSrcPort stores port as the TCP or UDP source port of b, or as the
// identifier of an ICMP or ICMPv6 echo message, and reports whether b has
// such a field.
func SetSrcPort(b []byte, p *Parsed, port uint16) bool {
	return set(b, p, 0, nil, 0, port)
}

// SetDstPort stores port as the TCP or UDP destination port of b, or as the
// identifier of an ICMP or ICMPv6 echo message, and reports whether b has
// such a field.
func SetDstPort(b []byte, p *Parsed, port uint16) bool {
	return set(b, p, 0, nil, 2, port)
}

// SetSrc stores a as the source address of b and, when b has a port field
// (see SetSrcPort), port as its source port, updating each checksum once for
// both changes.
func SetSrc(b []byte, p *Parsed, a [16]byte, port uint16) {
	setAddrPort(b, p, p.srcOffset(), &a, 0, port)
}

// SetDst stores a as the destination address of b and, when b has a port
// field (see SetDstPort), port as its destination port, updating each
// checksum once for both changes.
func SetDst(b []byte, p *Parsed, a [16]byte, port uint16) {
	setAddrPort(b, p, p.dstOffset(), &a, 2, port)
}

func (p *Parsed) srcOffset() int {
	if p.Version == 4 {
		return ipv4SrcOffset
	}
	return ipv6SrcOffset
}

func (p *Parsed) dstOffset() int {
	if p.Version == 4 {
		return ipv4DstOffset
	}
	return ipv6DstOffset
}

// setAddrPort is set for an address and a port together. It takes a
// shorter way for the packets that make up nearly all of the traffic: TCP
// or UDP, not a non-first fragment, with the checksum field present, and no
// Routing header. Every other packet goes to set, which is also the
// reference the short way is tested against.
func setAddrPort(b []byte, p *Parsed, off int, a *[16]byte, field int, port uint16) {
	var c int
	switch p.Proto {
	case ProtoTCP:
		c = p.IPHeaderLen + tcpChecksumOffset
	case ProtoUDP:
		c = p.IPHeaderLen + udpChecksumOffset
	}
	if c == 0 || p.FragOffset != 0 || p.routed || c+2 > p.Length || p.Length > len(b) {
		set(b, p, off, a, field, port)
		return
	}
	pf := p.IPHeaderLen + field
	oldPort := binary.BigEndian.Uint16(b[pf:])
	var d uint64 // ~m + m' over every changed word (RFC 1624, section 3)
	addr := &p.Dst
	if off == ipv4SrcOffset && p.Version == 4 || off == ipv6SrcOffset && p.Version == 6 {
		addr = &p.Src
	}
	if p.Version == 4 {
		old, new := binary.BigEndian.Uint32(b[off:]), binary.BigEndian.Uint32(a[:4])
		d = uint64(^old) + uint64(new)
		binary.BigEndian.PutUint32(b[off:], new)
		h := IPv4(b)
		h.SetChecksum(^fold(uint64(^h.Checksum()) + d))
		*(*[4]byte)(addr[:4]) = [4]byte(a[:4])
	} else {
		old := b[off : off+16]
		var cy uint64
		d, cy = bits.Add64(^binary.BigEndian.Uint64(old[:8]), binary.BigEndian.Uint64(a[:8]), 0)
		d, cy = bits.Add64(d, ^binary.BigEndian.Uint64(old[8:16]), cy)
		d, cy = bits.Add64(d, binary.BigEndian.Uint64(a[8:]), cy)
		d = uint64(fold(d)) + cy
		copy(old, a[:])
		*addr = *a
	}
	binary.BigEndian.PutUint16(b[pf:], port)
	if field == 0 {
		p.SrcPort = port
	} else {
		p.DstPort = port
	}
	old := binary.BigEndian.Uint16(b[c:])
	if p.Proto == ProtoUDP && old == 0 {
		// No checksum sent; see storeChecksum.
		return
	}
	x := ^fold(uint64(^old) + d + uint64(^oldPort) + uint64(port))
	if p.Proto == ProtoUDP {
		x = udpChecksum(x)
	}
	binary.BigEndian.PutUint16(b[c:], x)
}

// set stores address a (unless nil) at offset off and port at offset
// field of the upper-layer header (unless field < 0), and fixes the
// checksums with one incremental update each. It reports whether b has the
// port field asked for.
func set(b []byte, p *Parsed, off int, a *[16]byte, field int, port uint16) bool {
	// ip and l4 are the one's-complement differences the rewrite makes to
	// the sums that cover it: ~m + m' of RFC 1624, section 3, over every
	// changed word.
	var ip, l4 uint64
	c, pseudo := p.checksumField()
	fix := false
	if a != nil {
		n := 16
		if p.Version == 4 {
			n = 4
		}
		old := b[off : off+n]
		if n == 4 {
			ip = uint64(^binary.BigEndian.Uint32(old)) + uint64(binary.BigEndian.Uint32(a[:]))
		} else {
			// Two 64-bit words with end-around carry (see sum).
			var cy uint64
			ip, cy = bits.Add64(^binary.BigEndian.Uint64(old[:8]), binary.BigEndian.Uint64(a[:8]), 0)
			ip, cy = bits.Add64(ip, ^binary.BigEndian.Uint64(old[8:16]), cy)
			ip, cy = bits.Add64(ip, binary.BigEndian.Uint64(a[8:]), cy)
			ip = uint64(fold(ip)) + cy
		}
		copy(old, a[:n])
		if p.Version == 4 {
			h := IPv4(b)
			h.SetChecksum(^fold(uint64(^h.Checksum()) + ip))
		}
		if pseudo && !(off == ipv6DstOffset && p.Version == 6 && p.routed) {
			l4, fix = ip, true
		}
		// Parsed keeps the unused bytes of an IPv4 address zero already.
		if off == ipv4SrcOffset && p.Version == 4 || off == ipv6SrcOffset && p.Version == 6 {
			copy(p.Src[:n], a[:n])
		} else {
			copy(p.Dst[:n], a[:n])
		}
	}
	hasPort := false
	if field >= 0 {
		if f, echo := p.portOffset(field); f >= 0 {
			hasPort, fix = true, true
			old := binary.BigEndian.Uint16(b[f:])
			binary.BigEndian.PutUint16(b[f:], port)
			l4 += uint64(^old) + uint64(port)
			switch {
			case echo:
				p.SrcPort, p.DstPort = port, port
			case field == 0:
				p.SrcPort = port
			default:
				p.DstPort = port
			}
		}
	}
	if c >= 0 && fix {
		p.storeChecksum(b, c, ^fold(uint64(^binary.BigEndian.Uint16(b[c:]))+l4))
	}
	return hasPort
}

// maskAddr zeroes the bytes of a that an address of p's version does not use,
// keeping Parsed's invariant for IPv4.
func (p *Parsed) maskAddr(a [16]byte) [16]byte {
	if p.Version == 4 {
		return [16]byte{a[0], a[1], a[2], a[3]}
	}
	return a
}

// portOffset returns the offset in b of the port at offset field of the
// upper-layer header, and whether it is an echo identifier, which is at
// offset 4 whichever port is asked for: it names the flow at both ends, as a
// port pair would. It returns -1 when b has no such field.
func (p *Parsed) portOffset(field int) (int, bool) {
	if p.FragOffset != 0 {
		return -1, false
	}
	switch {
	case p.Proto == ProtoTCP || p.Proto == ProtoUDP:
		return p.IPHeaderLen + field, false
	case p.isEcho():
		return p.IPHeaderLen + 4, true
	}
	return -1, false
}

// checksumField returns the offset in b of the upper-layer checksum that a
// rewrite must fix and whether it covers the pseudo-header, or -1 when there
// is none: a non-first fragment, another protocol, or a field past the end of
// an ICMP error's quote.
func (p *Parsed) checksumField() (off int, pseudo bool) {
	if p.FragOffset != 0 {
		return -1, false
	}
	switch {
	case p.Proto == ProtoTCP:
		off, pseudo = tcpChecksumOffset, true
	case p.Proto == ProtoUDP:
		off, pseudo = udpChecksumOffset, true
	case p.Proto == ProtoICMPv4 && p.Version == 4:
		off, pseudo = icmpChecksumOffset, false
	case p.Proto == ProtoICMPv6 && p.Version == 6:
		off, pseudo = icmpChecksumOffset, true
	default:
		return -1, false
	}
	off += p.IPHeaderLen
	if off+2 > p.Length {
		return -1, false
	}
	return off, pseudo
}

// storeChecksum writes an updated upper-layer checksum c at offset off,
// applying the rules of the protocol's checksum field. b must already hold
// the rewritten field.
func (p *Parsed) storeChecksum(b []byte, off int, c uint16) {
	switch p.Proto {
	case ProtoUDP:
		// Zero means no checksum was sent (RFC 768); RFC 6935 allows it
		// over IPv6 for tunnels too. Keep it, and never produce it.
		if binary.BigEndian.Uint16(b[off:]) == 0 {
			return
		}
		c = udpChecksum(c)
	case ProtoICMPv4:
		// Without a pseudo-header an ICMP message can be all zeros, whose
		// checksum is 0xffff; equation 3 of RFC 1624 yields the other zero,
		// 0x0000, when a rewrite produces that message.
		if c == 0 && !p.quoted && !p.IsFragment() && icmpAllZero(b[p.IPHeaderLen:p.Length]) {
			c = 0xffff
		}
	}
	binary.BigEndian.PutUint16(b[off:], c)
}

// icmpAllZero reports whether the ICMP message m is zero outside its checksum.
func icmpAllZero(m []byte) bool {
	for i, v := range m {
		if v != 0 && (i < icmpChecksumOffset || i > icmpChecksumOffset+1) {
			return false
		}
	}
	return true
}

// RecomputeL4Checksum computes the TCP, UDP, ICMP or ICMPv6 checksum of b
// from scratch and stores it; p is b's Decode result. It serves after a
// change too wide for incremental update, such as translating the packet
// quoted in an ICMP error. A UDP checksum of zero stays zero. It reports false,
// changing nothing, for a fragment (whose checksum covers data it does not
// hold), a DecodeInner result, an IPv6 packet with a Routing header, or
// another protocol.
func RecomputeL4Checksum(b []byte, p *Parsed) bool {
	c, pseudo := p.checksumField()
	if c < 0 || p.quoted || p.IsFragment() || p.routed {
		return false
	}
	l4 := b[p.IPHeaderLen:p.Length]
	var ph uint16
	if pseudo {
		ph = p.pseudoHeader(len(l4))
	}
	switch p.Proto {
	case ProtoTCP:
		TCP(l4).SetChecksum(TCP(l4).ComputeChecksum(ph))
	case ProtoUDP:
		u := UDP(l4)
		if u.Checksum() != 0 {
			u.SetChecksum(u.ComputeChecksum(p.pseudoHeader(int(u.Length()))))
		}
	case ProtoICMPv4:
		ICMPv4(l4).SetChecksum(ICMPv4(l4).ComputeChecksum())
	case ProtoICMPv6:
		ICMPv6(l4).SetChecksum(ICMPv6(l4).ComputeChecksum(ph))
	}
	return true
}

// pseudoHeader returns the pseudo-header sum for p's addresses and protocol
// and an upper-layer length of n.
func (p *Parsed) pseudoHeader(n int) uint16 {
	if p.Version == 4 {
		return PseudoHeaderChecksum(p.Proto, p.Src[:4], p.Dst[:4], n)
	}
	return PseudoHeaderChecksum(p.Proto, p.Src[:], p.Dst[:], n)
}
