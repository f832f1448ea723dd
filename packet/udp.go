package packet

import "encoding/binary"

// UDP is a view of a UDP header (RFC 768). Accessors need at least
// UDPHeaderLen bytes.
type UDP []byte

// UDPHeaderLen is the length of the UDP header.
const UDPHeaderLen = 8

const udpChecksumOffset = 6

// SrcPort returns the source port.
func (u UDP) SrcPort() uint16 { return binary.BigEndian.Uint16(u[0:]) }

// DstPort returns the destination port.
func (u UDP) DstPort() uint16 { return binary.BigEndian.Uint16(u[2:]) }

// Length returns the length field: header and data in bytes.
func (u UDP) Length() uint16 { return binary.BigEndian.Uint16(u[4:]) }

// Checksum returns the checksum field; zero means the sender computed none.
func (u UDP) Checksum() uint16 { return binary.BigEndian.Uint16(u[udpChecksumOffset:]) }

// SetChecksum stores c in the checksum field.
func (u UDP) SetChecksum(c uint16) { binary.BigEndian.PutUint16(u[udpChecksumOffset:], c) }

// SetSrcPort stores port and updates the checksum unless it is absent.
func (u UDP) SetSrcPort(port uint16) {
	u.updateChecksum16(u.SrcPort(), port)
	binary.BigEndian.PutUint16(u[0:], port)
}

// SetDstPort stores port and updates the checksum unless it is absent.
func (u UDP) SetDstPort(port uint16) {
	u.updateChecksum16(u.DstPort(), port)
	binary.BigEndian.PutUint16(u[2:], port)
}

func (u UDP) updateChecksum16(old, new uint16) {
	if c := u.Checksum(); c != 0 {
		u.SetChecksum(udpChecksum(UpdateChecksum16(c, old, new)))
	}
}

// ComputeChecksum returns the checksum over the Length bytes of the datagram
// computed from scratch, as it should be stored (never zero); pseudo is the
// PseudoHeaderChecksum. u must hold Length bytes.
func (u UDP) ComputeChecksum(pseudo uint16) uint16 {
	n := int(u.Length())
	return udpChecksum(^fold(sum(u[udpChecksumOffset+2:n], sumScalar(u[:udpChecksumOffset], uint64(pseudo)))))
}

// udpChecksum maps a computed checksum of zero to 0xffff, because zero in the
// field means "no checksum" (RFC 768; RFC 8200, section 8.1).
func udpChecksum(c uint16) uint16 {
	if c == 0 {
		return 0xffff
	}
	return c
}
