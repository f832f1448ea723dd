package packet

import "encoding/binary"

// TCP is a view of a TCP header (RFC 9293, section 3.1). Accessors need at
// least TCPMinHeaderLen bytes; Options needs DataOffset bytes.
type TCP []byte

// TCPMinHeaderLen is the length of a TCP header without options.
const TCPMinHeaderLen = 20

// TCP flags, the bits of byte 13 of the header.
const (
	TCPFlagFIN uint8 = 0x01
	TCPFlagSYN uint8 = 0x02
	TCPFlagRST uint8 = 0x04
	TCPFlagPSH uint8 = 0x08
	TCPFlagACK uint8 = 0x10
	TCPFlagURG uint8 = 0x20
	TCPFlagECE uint8 = 0x40
	TCPFlagCWR uint8 = 0x80
)

const tcpChecksumOffset = 16

// SrcPort returns the source port.
func (t TCP) SrcPort() uint16 { return binary.BigEndian.Uint16(t[0:]) }

// DstPort returns the destination port.
func (t TCP) DstPort() uint16 { return binary.BigEndian.Uint16(t[2:]) }

// Seq returns the sequence number.
func (t TCP) Seq() uint32 { return binary.BigEndian.Uint32(t[4:]) }

// Ack returns the acknowledgment number.
func (t TCP) Ack() uint32 { return binary.BigEndian.Uint32(t[8:]) }

// DataOffset returns the header length in bytes, options included.
func (t TCP) DataOffset() int { return int(t[12]>>4) * 4 }

// Flags returns the control bits (TCPFlag*).
func (t TCP) Flags() uint8 { return t[13] }

// Window returns the receive window field.
func (t TCP) Window() uint16 { return binary.BigEndian.Uint16(t[14:]) }

// Checksum returns the checksum field.
func (t TCP) Checksum() uint16 { return binary.BigEndian.Uint16(t[tcpChecksumOffset:]) }

// Options returns the options area, between the fixed header and the data.
func (t TCP) Options() []byte { return t[TCPMinHeaderLen:t.DataOffset()] }

// SetChecksum stores c in the checksum field.
func (t TCP) SetChecksum(c uint16) { binary.BigEndian.PutUint16(t[tcpChecksumOffset:], c) }

// SetSrcPort stores port and updates the checksum.
func (t TCP) SetSrcPort(port uint16) {
	t.SetChecksum(UpdateChecksum16(t.Checksum(), t.SrcPort(), port))
	binary.BigEndian.PutUint16(t[0:], port)
}

// SetDstPort stores port and updates the checksum.
func (t TCP) SetDstPort(port uint16) {
	t.SetChecksum(UpdateChecksum16(t.Checksum(), t.DstPort(), port))
	binary.BigEndian.PutUint16(t[2:], port)
}

// ComputeChecksum returns the checksum of the whole segment t computed from
// scratch, as it should be stored; pseudo is the PseudoHeaderChecksum.
func (t TCP) ComputeChecksum(pseudo uint16) uint16 {
	return ^fold(sum(t[tcpChecksumOffset+2:], sumScalar(t[:tcpChecksumOffset], uint64(pseudo))))
}
