package natengine

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// The wire form of a Record, big-endian:
//
//	0      op << 4 | flags (1 IPv6, 2 inbound, 4 echo)
//	1      protocol
//	2..5   state word
//	6..9   age, seconds
//	10..15 local, global, remote port
//	16..   local, global, remote address: 4 bytes each, 16 for IPv6
//
// 28 bytes for IPv4, 64 for IPv6.
const (
	recordHeader = 16
	// RecordSize4 and RecordSize6 are the encoded sizes of a Record.
	RecordSize4 = recordHeader + 3*4
	RecordSize6 = recordHeader + 3*16

	recV6      = 1
	recInbound = 2
	recEcho    = 4
	recFlags   = recV6 | recInbound | recEcho
	// stKnown are the bits a state word may carry.
	stKnown = stateMask | stReplied | stFinOrig | stFinReply
)

// ErrRecord is wrapped by every error of DecodeRecord.
var ErrRecord = errors.New("natengine: malformed flow record")

// AppendRecord appends the wire form of r to b.
func AppendRecord(b []byte, r *Record) []byte {
	flags := byte(0)
	if r.V6 {
		flags |= recV6
	}
	if r.Inbound {
		flags |= recInbound
	}
	if r.Echo {
		flags |= recEcho
	}
	b = append(b, byte(r.Op)<<4|flags, r.Proto)
	b = binary.BigEndian.AppendUint32(b, r.State)
	b = binary.BigEndian.AppendUint32(b, r.Age)
	b = binary.BigEndian.AppendUint16(b, r.LPort)
	b = binary.BigEndian.AppendUint16(b, r.GPort)
	b = binary.BigEndian.AppendUint16(b, r.RPort)
	n := 4
	if r.V6 {
		n = 16
	}
	b = append(b, r.Local[:n]...)
	b = append(b, r.Global[:n]...)
	return append(b, r.Remote[:n]...)
}

// DecodeRecord decodes the record at the start of b and returns it and its
// length. It refuses an unknown op, flag or state bit; it does not check
// that the record makes sense for a protocol (Import does).
func DecodeRecord(b []byte) (Record, int, error) {
	var r Record
	if len(b) < recordHeader {
		return r, 0, fmt.Errorf("%w: %d bytes, want at least %d", ErrRecord, len(b), recordHeader)
	}
	r.Op, r.Proto = Op(b[0]>>4), b[1]
	flags := b[0] & 0x0f
	if r.Op < OpNew || r.Op > OpRemove {
		return Record{}, 0, fmt.Errorf("%w: op %d", ErrRecord, r.Op)
	}
	if flags&^recFlags != 0 {
		return Record{}, 0, fmt.Errorf("%w: flags %#x", ErrRecord, flags)
	}
	r.V6, r.Inbound, r.Echo = flags&recV6 != 0, flags&recInbound != 0, flags&recEcho != 0
	r.State = binary.BigEndian.Uint32(b[2:])
	if s := r.FlowState(); r.State&^stKnown != 0 || s < StateUnreplied || s > StateClosed {
		return Record{}, 0, fmt.Errorf("%w: state word %#x", ErrRecord, r.State)
	}
	r.Age = binary.BigEndian.Uint32(b[6:])
	r.LPort = binary.BigEndian.Uint16(b[10:])
	r.GPort = binary.BigEndian.Uint16(b[12:])
	r.RPort = binary.BigEndian.Uint16(b[14:])
	n := 4
	if r.V6 {
		n = 16
	}
	size := recordHeader + 3*n
	if len(b) < size {
		return Record{}, 0, fmt.Errorf("%w: %d bytes, want %d", ErrRecord, len(b), size)
	}
	a := b[recordHeader:]
	copy(r.Local[:n], a)
	copy(r.Global[:n], a[n:])
	copy(r.Remote[:n], a[2*n:])
	return r, size, nil
}
