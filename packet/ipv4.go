package packet

import "encoding/binary"

// IPv4 is a view of an IPv4 header (RFC 791, section 3.1) at the start of a
// packet. Accessors need at least IPv4MinHeaderLen bytes.
type IPv4 []byte

// IPv4 header sizes and field values.
const (
	IPv4MinHeaderLen   = 20
	ipv4FlagDF         = 0x4000
	ipv4FlagMF         = 0x2000
	ipv4FragOffsetMask = 0x1fff
)

// IANA protocol numbers the package interprets.
const (
	ProtoICMPv4 uint8 = 1
	ProtoTCP    uint8 = 6
	ProtoUDP    uint8 = 17
	ProtoICMPv6 uint8 = 58
)

// Version returns the IP version nibble.
func (h IPv4) Version() uint8 { return h[0] >> 4 }

// HeaderLen returns the header length in bytes, options included.
func (h IPv4) HeaderLen() int { return int(h[0]&0x0f) * 4 }

// TOS returns the DSCP and ECN byte.
func (h IPv4) TOS() uint8 { return h[1] }

// TotalLen returns the datagram length in bytes, header included.
func (h IPv4) TotalLen() uint16 { return binary.BigEndian.Uint16(h[2:]) }

// ID returns the identification field used to reassemble fragments.
func (h IPv4) ID() uint16 { return binary.BigEndian.Uint16(h[4:]) }

// DontFragment reports whether the DF flag is set.
func (h IPv4) DontFragment() bool { return binary.BigEndian.Uint16(h[6:])&ipv4FlagDF != 0 }

// MoreFragments reports whether the MF flag is set.
func (h IPv4) MoreFragments() bool { return binary.BigEndian.Uint16(h[6:])&ipv4FlagMF != 0 }

// FragOffset returns the fragment offset in 8-byte units.
func (h IPv4) FragOffset() uint16 { return binary.BigEndian.Uint16(h[6:]) & ipv4FragOffsetMask }

// TTL returns the time to live.
func (h IPv4) TTL() uint8 { return h[8] }

// Protocol returns the upper-layer protocol number.
func (h IPv4) Protocol() uint8 { return h[9] }

// Checksum returns the header checksum field.
func (h IPv4) Checksum() uint16 { return binary.BigEndian.Uint16(h[10:]) }

// Src returns the source address.
func (h IPv4) Src() [4]byte { return [4]byte(h[12:16]) }

// Dst returns the destination address.
func (h IPv4) Dst() [4]byte { return [4]byte(h[16:20]) }

// SetChecksum stores c in the header checksum field.
func (h IPv4) SetChecksum(c uint16) { binary.BigEndian.PutUint16(h[10:], c) }

// ComputeChecksum returns the header checksum computed from scratch over
// HeaderLen bytes, as it should be stored.
func (h IPv4) ComputeChecksum() uint16 {
	hl := h.HeaderLen()
	return ^fold(sumScalar(h[12:hl], sumScalar(h[:10], 0)))
}

// IsChecksumValid reports whether the header checksum verifies. The header
// must be HeaderLen bytes long.
func (h IPv4) IsChecksumValid() bool {
	return Checksum(h[:h.HeaderLen()], 0) == 0xffff
}

// SetSrc stores a as the source address and updates the header checksum. It
// leaves the upper-layer checksum to the caller; SetSrcAddr fixes both.
func (h IPv4) SetSrc(a [4]byte) {
	h.SetChecksum(UpdateChecksum(h.Checksum(), h[12:16], a[:]))
	copy(h[12:16], a[:])
}

// SetDst stores a as the destination address and updates the header
// checksum. It leaves the upper-layer checksum to the caller; SetDstAddr fixes
// both.
func (h IPv4) SetDst(a [4]byte) {
	h.SetChecksum(UpdateChecksum(h.Checksum(), h[16:20], a[:]))
	copy(h[16:20], a[:])
}

// SetTTL stores ttl and updates the header checksum.
func (h IPv4) SetTTL(ttl uint8) {
	// TTL shares a 16-bit word with the protocol (RFC 1624, section 4).
	old := binary.BigEndian.Uint16(h[8:])
	h[8] = ttl
	h.SetChecksum(UpdateChecksum16(h.Checksum(), old, binary.BigEndian.Uint16(h[8:])))
}
