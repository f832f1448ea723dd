package packet

import "encoding/binary"

// IPv6 is a view of the fixed IPv6 header (RFC 8200, section 3). Accessors
// need at least IPv6HeaderLen bytes.
type IPv6 []byte

// IPv6HeaderLen is the length of the fixed IPv6 header.
const IPv6HeaderLen = 40

// IPv6 extension header numbers (RFC 8200, section 4; IANA "IPv6 Extension
// Header Types").
const (
	ipv6HopByHop    uint8 = 0
	ipv6Routing     uint8 = 43
	ipv6Fragment    uint8 = 44
	ipv6AH          uint8 = 51
	ipv6DestOptions uint8 = 60
	ipv6Mobility    uint8 = 135
	ipv6HIP         uint8 = 139
	ipv6Shim6       uint8 = 140
	ipv6Test1       uint8 = 253
	ipv6Test2       uint8 = 254

	ipv6FragmentHeaderLen = 8
)

// Version returns the IP version nibble.
func (h IPv6) Version() uint8 { return h[0] >> 4 }

// TrafficClass returns the DSCP and ECN byte.
func (h IPv6) TrafficClass() uint8 { return uint8(binary.BigEndian.Uint16(h[0:]) >> 4) }

// FlowLabel returns the 20-bit flow label.
func (h IPv6) FlowLabel() uint32 { return binary.BigEndian.Uint32(h[0:]) & 0xfffff }

// PayloadLen returns the length after the fixed header, extension headers
// included.
func (h IPv6) PayloadLen() uint16 { return binary.BigEndian.Uint16(h[4:]) }

// NextHeader returns the type of the header after the fixed header.
func (h IPv6) NextHeader() uint8 { return h[6] }

// HopLimit returns the hop limit.
func (h IPv6) HopLimit() uint8 { return h[7] }

// Src returns the source address.
func (h IPv6) Src() [16]byte { return [16]byte(h[8:24]) }

// Dst returns the destination address.
func (h IPv6) Dst() [16]byte { return [16]byte(h[24:40]) }

// SetSrc stores a as the source address. IPv6 has no header checksum; the
// upper-layer checksum is left to the caller, and SetSrcAddr fixes it.
func (h IPv6) SetSrc(a [16]byte) { copy(h[8:24], a[:]) }

// SetDst stores a as the destination address. The upper-layer checksum is
// left to the caller, and SetDstAddr fixes it.
func (h IPv6) SetDst(a [16]byte) { copy(h[24:40], a[:]) }

// SetHopLimit stores the hop limit.
func (h IPv6) SetHopLimit(n uint8) { h[7] = n }

// ipv6Chain is the result of walking the extension header chain.
type ipv6Chain struct {
	proto uint8 // protocol of the header at off, or of the fragment's data
	off   int   // offset of that header
	frag  bool  // a Fragment header was seen
	// routed is set by a Routing header with segments left: the
	// pseudo-header then holds the final destination from that header, not
	// the Dst field (RFC 8200, section 8.1).
	routed   bool
	fragOff  uint16
	moreFrag bool
	fragID   uint32
}

// walkIPv6 follows the extension headers of the n-byte packet b (RFC 8200,
// section 4) to the upper-layer header. It stops at the data of a non-first
// fragment, whose headers are in another fragment. ESP is treated as upper
// layer because what follows it is encrypted.
func walkIPv6(b []byte, n int) (c ipv6Chain, r DropReason) {
	c.proto = b[6]
	c.off = IPv6HeaderLen
	for {
		var hl int
		switch c.proto {
		case ipv6HopByHop, ipv6Routing, ipv6DestOptions, ipv6Mobility, ipv6HIP, ipv6Shim6, ipv6Test1, ipv6Test2, ipv6AH:
			// Hop-by-Hop Options must directly follow the IPv6 header
			// (RFC 8200, section 4.1).
			if c.proto == ipv6HopByHop && c.off != IPv6HeaderLen {
				return c, DropBadExtensionHeader
			}
			if c.off+2 > n {
				return c, DropTruncated
			}
			if c.proto == ipv6AH {
				hl = (int(b[c.off+1]) + 2) * 4 // RFC 4302, section 2.2
			} else {
				hl = (int(b[c.off+1]) + 1) * 8
			}
			if c.proto == ipv6Routing && c.off+4 <= n && b[c.off+3] != 0 {
				c.routed = true
			}
		case ipv6Fragment:
			if c.frag {
				return c, DropBadExtensionHeader
			}
			hl = ipv6FragmentHeaderLen
			if c.off+hl > n {
				return c, DropTruncated
			}
			c.frag = true
			fo := binary.BigEndian.Uint16(b[c.off+2:])
			c.fragOff = fo >> 3
			c.moreFrag = fo&1 != 0
			c.fragID = binary.BigEndian.Uint32(b[c.off+4:])
		default:
			return c, DropNone
		}
		if c.off+hl > n {
			return c, DropTruncated
		}
		c.proto = b[c.off]
		c.off += hl
		if c.frag && c.fragOff != 0 {
			return c, DropNone
		}
	}
}
