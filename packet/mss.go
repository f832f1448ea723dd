package packet

import (
	"encoding/binary"
	"math/bits"
)

// TCP option kinds (RFC 9293, section 3.2).
const (
	tcpOptEOL    = 0
	tcpOptNOP    = 1
	tcpOptMSS    = 2
	tcpOptMSSLen = 4
)

// MSS returns the value of the maximum segment size option of the TCP SYN or
// SYN-ACK in b (p is b's Decode result); ok is false when b is no such segment
// or has no well-formed MSS option. With several, it returns the last, which
// is the one a receiver that parses options in order ends up using.
func MSS(b []byte, p *Parsed) (mss uint16, ok bool) {
	opts := synOptions(b, p)
	for i := nextMSS(opts, 0); i >= 0; i = nextMSS(opts, i+tcpOptMSSLen) {
		mss, ok = binary.BigEndian.Uint16(opts[i+2:]), true
	}
	return mss, ok
}

// ClampMSS lowers the MSS option of a TCP SYN or SYN-ACK in b to at most mss,
// fixing the TCP checksum incrementally; reports whether it changed b. p is
// b's Decode result. Every MSS option is clamped, so that no receiver can pick
// an unclamped one. A SYN without the option is left alone: its peer assumes
// 536 (IPv4) or 1220 (IPv6) bytes (RFC 9293, section 3.7.1), below any tunnel
// MTU.
func ClampMSS(b []byte, p *Parsed, mss uint16) bool {
	opts := synOptions(b, p)
	if opts == nil {
		return false
	}
	t := TCP(b[p.IPHeaderLen:])
	changed := false
	for i := nextMSS(opts, 0); i >= 0; i = nextMSS(opts, i+tcpOptMSSLen) {
		v := binary.BigEndian.Uint16(opts[i+2:])
		if v <= mss {
			continue
		}
		// Options need not be 16-bit aligned. A value at an odd offset
		// adds its bytes to the sum swapped (RFC 1071, section 2(B)).
		old, new := v, mss
		if (TCPMinHeaderLen+i+2)%2 != 0 {
			old, new = bits.ReverseBytes16(old), bits.ReverseBytes16(new)
		}
		t.SetChecksum(UpdateChecksum16(t.Checksum(), old, new))
		binary.BigEndian.PutUint16(opts[i+2:], mss)
		changed = true
	}
	return changed
}

// synOptions returns the TCP options of b when it is a whole SYN segment, or
// nil.
func synOptions(b []byte, p *Parsed) []byte {
	if p.Proto != ProtoTCP || p.FragOffset != 0 || p.quoted || p.TCPFlags&TCPFlagSYN == 0 {
		return nil
	}
	return TCP(b[p.IPHeaderLen:p.Length]).Options()
}

// nextMSS returns the offset in opts of the first MSS option at or after i,
// or -1. It stops at the end-of-list option and at a malformed length, past
// which options cannot be parsed.
func nextMSS(opts []byte, i int) int {
	for i < len(opts) {
		switch opts[i] {
		case tcpOptEOL:
			return -1
		case tcpOptNOP:
			i++
			continue
		}
		if i+1 >= len(opts) {
			return -1
		}
		l := int(opts[i+1])
		if l < 2 || i+l > len(opts) {
			return -1
		}
		if opts[i] == tcpOptMSS && l == tcpOptMSSLen {
			return i
		}
		i += l
	}
	return -1
}
