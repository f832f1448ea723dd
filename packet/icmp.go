package packet

import "encoding/binary"

// ICMPv4 is a view of an ICMP message (RFC 792). Accessors need at least
// ICMPHeaderLen bytes.
type ICMPv4 []byte

// ICMPv6 is a view of an ICMPv6 message (RFC 4443). Accessors need at least
// ICMPHeaderLen bytes.
type ICMPv6 []byte

// ICMPHeaderLen is the length of the part of an ICMP or ICMPv6 message that
// precedes the data: type, code, checksum and four type-specific bytes (the
// echo identifier and sequence number, an MTU, or unused).
const ICMPHeaderLen = 8

const icmpChecksumOffset = 2

// ICMPv4 message types the package interprets (IANA "ICMP Type Numbers").
const (
	ICMPv4EchoReply      uint8 = 0
	ICMPv4Unreachable    uint8 = 3
	ICMPv4SourceQuench   uint8 = 4
	ICMPv4Redirect       uint8 = 5
	ICMPv4EchoRequest    uint8 = 8
	ICMPv4TimeExceeded   uint8 = 11
	ICMPv4ParamProblem   uint8 = 12
	ICMPv4FragNeededCode uint8 = 4 // code of ICMPv4Unreachable (RFC 1191)
)

// ICMPv6 message types the package interprets (RFC 4443, section 2.1).
const (
	ICMPv6Unreachable  uint8 = 1
	ICMPv6PacketTooBig uint8 = 2
	ICMPv6TimeExceeded uint8 = 3
	ICMPv6ParamProblem uint8 = 4
	ICMPv6EchoRequest  uint8 = 128
	ICMPv6EchoReply    uint8 = 129
)

// Type returns the message type.
func (m ICMPv4) Type() uint8 { return m[0] }

// Code returns the message code.
func (m ICMPv4) Code() uint8 { return m[1] }

// Checksum returns the checksum field.
func (m ICMPv4) Checksum() uint16 { return binary.BigEndian.Uint16(m[icmpChecksumOffset:]) }

// Ident returns the echo identifier; meaningful for echo messages only.
func (m ICMPv4) Ident() uint16 { return binary.BigEndian.Uint16(m[4:]) }

// Seq returns the echo sequence number; meaningful for echo messages only.
func (m ICMPv4) Seq() uint16 { return binary.BigEndian.Uint16(m[6:]) }

// IsError reports whether the message is an error that quotes the datagram
// that caused it (RFC 1812, section 4.3.2.3).
func (m ICMPv4) IsError() bool { return icmpv4IsError(m.Type()) }

// SetChecksum stores c in the checksum field.
func (m ICMPv4) SetChecksum(c uint16) { binary.BigEndian.PutUint16(m[icmpChecksumOffset:], c) }

// SetIdent stores the echo identifier and updates the checksum.
func (m ICMPv4) SetIdent(id uint16) {
	m.SetChecksum(UpdateChecksum16(m.Checksum(), m.Ident(), id))
	binary.BigEndian.PutUint16(m[4:], id)
}

// ComputeChecksum returns the checksum of the whole message m computed from
// scratch, as it should be stored. ICMPv4 has no pseudo-header.
func (m ICMPv4) ComputeChecksum() uint16 {
	return ^fold(sum(m[icmpChecksumOffset+2:], sumScalar(m[:icmpChecksumOffset], 0)))
}

// Type returns the message type.
func (m ICMPv6) Type() uint8 { return m[0] }

// Code returns the message code.
func (m ICMPv6) Code() uint8 { return m[1] }

// Checksum returns the checksum field.
func (m ICMPv6) Checksum() uint16 { return binary.BigEndian.Uint16(m[icmpChecksumOffset:]) }

// Ident returns the echo identifier; meaningful for echo messages only.
func (m ICMPv6) Ident() uint16 { return binary.BigEndian.Uint16(m[4:]) }

// Seq returns the echo sequence number; meaningful for echo messages only.
func (m ICMPv6) Seq() uint16 { return binary.BigEndian.Uint16(m[6:]) }

// MTU returns the MTU of a Packet Too Big message (RFC 4443, section 3.2).
func (m ICMPv6) MTU() uint32 { return binary.BigEndian.Uint32(m[4:]) }

// IsError reports whether the message is an error, which quotes the packet
// that caused it: types 0 to 127 (RFC 4443, section 2.1).
func (m ICMPv6) IsError() bool { return m.Type() < 128 }

// SetChecksum stores c in the checksum field.
func (m ICMPv6) SetChecksum(c uint16) { binary.BigEndian.PutUint16(m[icmpChecksumOffset:], c) }

// SetIdent stores the echo identifier and updates the checksum.
func (m ICMPv6) SetIdent(id uint16) {
	m.SetChecksum(UpdateChecksum16(m.Checksum(), m.Ident(), id))
	binary.BigEndian.PutUint16(m[4:], id)
}

// ComputeChecksum returns the checksum of the whole message m computed from
// scratch, as it should be stored; pseudo is the PseudoHeaderChecksum
// (RFC 4443, section 2.3).
func (m ICMPv6) ComputeChecksum(pseudo uint16) uint16 {
	return ^fold(sum(m[icmpChecksumOffset+2:], sumScalar(m[:icmpChecksumOffset], uint64(pseudo))))
}

func icmpv4IsError(typ uint8) bool {
	switch typ {
	case ICMPv4Unreachable, ICMPv4SourceQuench, ICMPv4Redirect, ICMPv4TimeExceeded, ICMPv4ParamProblem:
		return true
	}
	return false
}

func icmpv4IsEcho(typ uint8) bool { return typ == ICMPv4EchoRequest || typ == ICMPv4EchoReply }

func icmpv6IsEcho(typ uint8) bool { return typ == ICMPv6EchoRequest || typ == ICMPv6EchoReply }

// isICMPError reports whether p decoded an ICMP or ICMPv6 error message.
func (p *Parsed) isICMPError() bool {
	switch {
	case p.Version == 4 && p.Proto == ProtoICMPv4:
		return icmpv4IsError(p.ICMPType)
	case p.Version == 6 && p.Proto == ProtoICMPv6:
		return p.ICMPType < 128
	}
	return false
}

// isEcho reports whether p decoded an ICMP or ICMPv6 echo request or reply,
// whose identifier stands in for both ports.
func (p *Parsed) isEcho() bool {
	switch {
	case p.Version == 4 && p.Proto == ProtoICMPv4:
		return icmpv4IsEcho(p.ICMPType)
	case p.Version == 6 && p.Proto == ProtoICMPv6:
		return icmpv6IsEcho(p.ICMPType)
	}
	return false
}

// ICMPInner returns the packet quoted by the ICMP or ICMPv6 error in b (p is
// b's Decode result), for translating the error through NAT: decode it with
// DecodeInner. The quote is usually truncated. When the error carries an
// RFC 4884 length, the quote ends there and the extension structure that
// follows is excluded. ok is false when b is not an ICMP error or is a
// non-first fragment.
func ICMPInner(b []byte, p *Parsed) (inner []byte, ok bool) {
	if !p.isICMPError() || p.FragOffset != 0 {
		return nil, false
	}
	start := p.IPHeaderLen + ICMPHeaderLen
	end := p.Length
	if n := icmpQuoteLen(b[p.IPHeaderLen:], p); n > 0 && start+n <= end {
		end = start + n
	}
	return b[start:end], true
}

// icmpQuoteLen returns the RFC 4884 length of the original datagram in bytes,
// or 0 when m carries none. The field is in 32-bit words in byte 5 of an
// ICMPv4 Destination Unreachable, Time Exceeded or Parameter Problem (RFC 4884,
// section 4.1), and in 64-bit words in byte 4 of an ICMPv6 Destination
// Unreachable or Time Exceeded (section 4.2).
func icmpQuoteLen(m []byte, p *Parsed) int {
	if p.Version == 4 {
		switch p.ICMPType {
		case ICMPv4Unreachable, ICMPv4TimeExceeded, ICMPv4ParamProblem:
			return int(m[5]) * 4
		}
		return 0
	}
	switch p.ICMPType {
	case ICMPv6Unreachable, ICMPv6TimeExceeded:
		return int(m[4]) * 8
	}
	return 0
}
