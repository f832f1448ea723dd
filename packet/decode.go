package packet

import (
	"encoding/binary"
	"net/netip"
)

// Parsed holds the fields of one packet that the data path needs. Decode
// fills it; keep one per worker and reuse it. It has no pointers, so it never
// keeps the packet alive.
type Parsed struct {
	// Src and Dst hold IPv4 addresses in the first 4 bytes, the rest zero.
	// They come first, 16-byte aligned, so that reading one whole does not
	// straddle the stores that wrote it.
	Src, Dst [16]byte
	Version  uint8 // 4 or 6
	// Proto is the IANA protocol number of the upper layer, after any IPv6
	// extension headers.
	Proto uint8
	// IPHeaderLen is the offset of the upper-layer header, IPv4 options and
	// IPv6 extension headers included.
	IPHeaderLen int
	// Length is the packet length according to the IP header (<= len(b));
	// bytes after it are ignored. After DecodeInner it is at most the length
	// of the quote.
	Length int
	// SrcPort and DstPort are the TCP or UDP ports; for an ICMP or ICMPv6
	// echo request or reply both hold the echo identifier.
	SrcPort, DstPort uint16
	TCPFlags         uint8
	TTL              uint8 // TTL or hop limit
	DontFragment     bool  // IPv4 DF
	MoreFragments    bool
	// FragOffset is in 8-byte units. Non-zero means a non-first fragment,
	// which has no upper-layer header: ports, flags and ICMP fields are zero.
	FragOffset         uint16
	FragID             uint32
	ICMPType, ICMPCode uint8

	// quoted is set by DecodeInner: b may end before Length says.
	quoted bool
	// routed marks an IPv6 packet whose upper-layer checksum covers a final
	// destination taken from a Routing header instead of Dst.
	routed bool
}

// Decode parses the IP packet at the start of b into p and returns DropNone,
// or the reason to drop a malformed packet (p is then partly filled). It
// checks the IPv4 header checksum but not the upper-layer checksum, which the
// receiving host checks end to end. It does not allocate.
func (p *Parsed) Decode(b []byte) DropReason {
	return p.decode(b, false)
}

// DecodeInner parses the packet quoted in an ICMP error (see ICMPInner) into
// p. Unlike Decode it accepts a packet cut short after the first 8 bytes of
// the upper-layer header, the least an error quotes (RFC 792), and does not
// check the IPv4 header checksum, which the original sender may have changed
// after the router quoted it. TCP flags are zero when the quote ends before
// them. The rewrite functions accept the result and skip checksum fields that
// were not quoted.
func (p *Parsed) DecodeInner(b []byte) DropReason {
	return p.decode(b, true)
}

func (p *Parsed) decode(b []byte, quoted bool) DropReason {
	*p = Parsed{quoted: quoted}
	if len(b) < 1 {
		return DropTruncated
	}
	switch b[0] >> 4 {
	case 4:
		return p.decodeIPv4(b)
	case 6:
		return p.decodeIPv6(b)
	}
	return DropBadVersion
}

func (p *Parsed) decodeIPv4(b []byte) DropReason {
	if len(b) < IPv4MinHeaderLen {
		return DropTruncated
	}
	h := IPv4(b)
	hl := h.HeaderLen()
	if hl < IPv4MinHeaderLen {
		return DropBadHeaderLength
	}
	if hl > len(b) {
		return DropTruncated
	}
	n := int(h.TotalLen())
	if n < hl {
		return DropBadTotalLength
	}
	if n > len(b) {
		if !p.quoted {
			return DropTruncated
		}
		n = len(b)
	}
	if !p.quoted && !h.IsChecksumValid() {
		return DropBadIPChecksum
	}
	p.Version = 4
	p.Proto = h.Protocol()
	copy(p.Src[:4], b[12:16])
	copy(p.Dst[:4], b[16:20])
	p.IPHeaderLen = hl
	p.Length = n
	p.TTL = h.TTL()
	p.DontFragment = h.DontFragment()
	p.MoreFragments = h.MoreFragments()
	p.FragOffset = h.FragOffset()
	p.FragID = uint32(h.ID())
	if !p.quoted {
		if r := checkFragment(p.Proto, p.FragOffset, p.MoreFragments, hl, n-hl); r != DropNone {
			return r
		}
	}
	if p.FragOffset != 0 {
		return DropNone
	}
	return p.decodeUpper(b[hl:n])
}

func (p *Parsed) decodeIPv6(b []byte) DropReason {
	if len(b) < IPv6HeaderLen {
		return DropTruncated
	}
	h := IPv6(b)
	// Jumbograms (RFC 2675) would need a payload length of zero and a
	// Hop-by-Hop option; a tunnel never carries them, so a zero payload
	// length is taken literally.
	n := IPv6HeaderLen + int(h.PayloadLen())
	if n > len(b) {
		if !p.quoted {
			return DropTruncated
		}
		n = len(b)
	}
	p.Version = 6
	p.Src = h.Src()
	p.Dst = h.Dst()
	p.Length = n
	p.TTL = h.HopLimit()
	c, r := walkIPv6(b, n)
	p.Proto = c.proto
	p.IPHeaderLen = c.off
	p.routed = c.routed
	if r != DropNone {
		return r
	}
	if c.frag {
		p.MoreFragments = c.moreFrag
		p.FragOffset = c.fragOff
		p.FragID = c.fragID
		if !p.quoted {
			if r := checkFragment(p.Proto, p.FragOffset, p.MoreFragments, c.off-IPv6HeaderLen-ipv6FragmentHeaderLen, n-c.off); r != DropNone {
				return r
			}
		}
		if p.FragOffset != 0 {
			return DropNone
		}
	}
	return p.decodeUpper(b[c.off:n])
}

// maxReassembled is the largest IPv4 total length and IPv6 payload length.
const maxReassembled = 65535

// checkFragment refuses fragments that no correct sender produces and that
// serve only to attack reassembly or filtering. fragLen is the length of the
// fragment's data and prefix that of what precedes the data once reassembled:
// the IPv4 header, or the IPv6 extension headers before the Fragment header.
func checkFragment(proto uint8, off uint16, more bool, prefix, fragLen int) DropReason {
	if off == 0 && !more {
		return DropNone
	}
	switch {
	case prefix+int(off)*8+fragLen > maxReassembled:
		// Reassembly would exceed the IPv4 total length or the IPv6
		// payload length field (RFC 8200, section 4.5).
		return DropBadFragment
	case more && fragLen%8 != 0:
		// Only the last fragment may end off an 8-byte boundary
		// (RFC 791, section 3.2; RFC 8200, section 4.5).
		return DropBadFragment
	case proto == ProtoTCP && off == 1:
		return DropBadFragment // RFC 1858, section 3.2
	}
	return DropNone
}

// decodeUpper reads the upper-layer header at the start of l4, which runs to
// the end of the packet, or of the quote.
func (p *Parsed) decodeUpper(l4 []byte) DropReason {
	switch p.Proto {
	case ProtoTCP:
		return p.decodeTCP(l4)
	case ProtoUDP:
		return p.decodeUDP(l4)
	case ProtoICMPv4:
		if p.Version == 4 {
			return p.decodeICMP(l4)
		}
	case ProtoICMPv6:
		if p.Version == 6 {
			return p.decodeICMP(l4)
		}
	}
	return DropNone
}

// quoteMin is the part of the upper-layer header an ICMP error must quote
// (RFC 792; RFC 1812, section 4.3.2.3): enough for ports, or type and code.
const quoteMin = 8

func (p *Parsed) decodeTCP(l4 []byte) DropReason {
	if p.quoted && len(l4) >= quoteMin && len(l4) < TCPMinHeaderLen {
		p.SrcPort = binary.BigEndian.Uint16(l4[0:])
		p.DstPort = binary.BigEndian.Uint16(l4[2:])
		if len(l4) > 13 {
			p.TCPFlags = l4[13]
		}
		return DropNone
	}
	if len(l4) < TCPMinHeaderLen {
		return DropTruncated
	}
	t := TCP(l4)
	if !p.quoted {
		// The whole header, options included, must be here; in a first
		// fragment too (RFC 7112 makes the same demand of IPv6).
		do := t.DataOffset()
		if do < TCPMinHeaderLen {
			return DropBadTCPHeader
		}
		if do > len(l4) {
			return DropTruncated
		}
	}
	p.SrcPort = t.SrcPort()
	p.DstPort = t.DstPort()
	p.TCPFlags = t.Flags()
	return DropNone
}

func (p *Parsed) decodeUDP(l4 []byte) DropReason {
	if len(l4) < UDPHeaderLen {
		return DropTruncated
	}
	u := UDP(l4)
	// The UDP length covers the reassembled datagram, so a first fragment
	// cannot be checked against it, nor can a quote.
	if !p.quoted && !p.MoreFragments {
		if ul := int(u.Length()); ul < UDPHeaderLen || ul > len(l4) {
			return DropBadUDPLength
		}
	}
	p.SrcPort = u.SrcPort()
	p.DstPort = u.DstPort()
	return DropNone
}

func (p *Parsed) decodeICMP(l4 []byte) DropReason {
	if len(l4) < ICMPHeaderLen {
		return DropTruncated
	}
	p.ICMPType = l4[0]
	p.ICMPCode = l4[1]
	if p.isEcho() {
		id := binary.BigEndian.Uint16(l4[4:])
		p.SrcPort = id
		p.DstPort = id
	}
	return DropNone
}

// SrcAddr returns the source address as a netip.Addr, without allocating.
// It is the zero Addr before a successful decode.
func (p *Parsed) SrcAddr() netip.Addr { return p.addr(&p.Src) }

// DstAddr returns the destination address as a netip.Addr, without
// allocating.
func (p *Parsed) DstAddr() netip.Addr { return p.addr(&p.Dst) }

func (p *Parsed) addr(a *[16]byte) netip.Addr {
	switch p.Version {
	case 4:
		return netip.AddrFrom4([4]byte(a[:4]))
	case 6:
		return netip.AddrFrom16(*a)
	}
	return netip.Addr{}
}

// IsFragment reports whether the packet is a fragment, first or not. A first
// fragment has the upper-layer header but not all of the data its checksum
// covers.
func (p *Parsed) IsFragment() bool { return p.MoreFragments || p.FragOffset != 0 }
