package packet

import "encoding/binary"

// TCP flags that segmentation moves: FIN and PSH stay on the last segment,
// CWR on the first (RFC 3168, section 6.1.2), as the kernel's TSO does.
const (
	tcpFlagFIN = 0x01
	tcpFlagPSH = 0x08
	tcpFlagCWR = 0x80
)

// Segment cuts the TCP or UDP super-packet pkt (proto 6 or 17), whose
// transport header starts at l4, into segments of at most size payload
// bytes: segment i goes to out[i][off:] and its length to sizes[i]. Each
// segment gets its own lengths, IPv4 ID (the first one's plus i), TCP
// sequence number and full checksums; the transport checksum field of pkt
// may hold anything, a partial sum included. out[0][off:] may be pkt itself,
// in which case the first segment is made in place. It returns the number
// of segments, or 0 when pkt is malformed, size is not positive, or the
// segments do not fit in out.
func Segment(pkt []byte, proto uint8, l4, size int, out [][]byte, sizes []int, off int) int {
	if n := Segments(pkt, proto, l4, size); n == 0 || n > len(out) || n > len(sizes) {
		return 0
	}
	return SegmentFrom(pkt, proto, l4, size, 0, out, sizes, off)
}

// SegmentFrom is Segment for a super-packet with more segments than out
// holds: it cuts segments first, first+1, and so on, as many as out and
// sizes hold, into out[0], out[1], ..., and returns how many it cut. They
// are the segments Segment would make. It returns 0 when pkt is malformed,
// first is past its last segment, or a buffer is too short.
func SegmentFrom(pkt []byte, proto uint8, l4, size, first int, out [][]byte, sizes []int, off int) int {
	total := Segments(pkt, proto, l4, size)
	if first < 0 || first >= total {
		return 0
	}
	n := min(total-first, len(out), len(sizes))
	hdr, _ := SegmentHeaderLen(pkt, proto, l4)
	for i := range n {
		start := hdr + (first+i)*size
		if len(out[i]) < off+hdr+min(size, len(pkt)-start) {
			return 0
		}
	}
	// Backwards, so that pkt's header is intact until the first segment,
	// which may be pkt itself, is rewritten last.
	for i := n - 1; i >= 0; i-- {
		k := first + i
		start := hdr + k*size
		end := min(start+size, len(pkt))
		seg := out[i][off : off+hdr+end-start]
		if k > 0 || &seg[0] != &pkt[0] {
			copy(seg, pkt[:hdr])
			copy(seg[hdr:], pkt[start:end])
		}
		finishSegment(seg, proto, l4, k, total, uint32(k*size))
		sizes[i] = len(seg)
	}
	return n
}

// Segments returns how many segments Segment cuts pkt into, or 0 when pkt
// is malformed or size is not positive.
func Segments(pkt []byte, proto uint8, l4, size int) int {
	hdr, ok := SegmentHeaderLen(pkt, proto, l4)
	if !ok || size <= 0 {
		return 0
	}
	return max(1, (len(pkt)-hdr+size-1)/size)
}

// SegmentHeaderLen checks the headers of super-packet pkt, whose transport
// header starts at l4, and returns their length, IP and transport together:
// what each of its segments carries before its payload.
func SegmentHeaderLen(pkt []byte, proto uint8, l4 int) (int, bool) {
	if len(pkt) < 1 {
		return 0, false
	}
	switch pkt[0] >> 4 {
	case 4:
		if len(pkt) < 20 || l4 != int(pkt[0]&0x0f)*4 || l4 < 20 || pkt[9] != proto {
			return 0, false
		}
	case 6:
		// csum_start may sit past extension headers; only the fixed
		// header's payload length is rewritten.
		if l4 < 40 {
			return 0, false
		}
	default:
		return 0, false
	}
	var hdr int
	switch proto {
	case 6:
		if len(pkt) < l4+20 {
			return 0, false
		}
		hdr = l4 + int(pkt[l4+12]>>4)*4
		if hdr < l4+20 {
			return 0, false
		}
	case 17:
		hdr = l4 + 8
	default:
		return 0, false
	}
	return hdr, len(pkt) >= hdr
}

// finishSegment gives segment i of n, whose payload starts seq bytes into
// the super-packet's, its lengths, ID, sequence number, flags and checksums.
func finishSegment(seg []byte, proto uint8, l4, i, n int, seq uint32) {
	var src, dst []byte
	if seg[0]>>4 == 4 {
		binary.BigEndian.PutUint16(seg[2:], uint16(len(seg)))
		binary.BigEndian.PutUint16(seg[4:], binary.BigEndian.Uint16(seg[4:])+uint16(i))
		seg[10], seg[11] = 0, 0
		binary.BigEndian.PutUint16(seg[10:], ^Checksum(seg[:l4], 0))
		src, dst = seg[12:16], seg[16:20]
	} else {
		binary.BigEndian.PutUint16(seg[4:], uint16(len(seg)-40))
		src, dst = seg[8:24], seg[24:40]
	}
	t := seg[l4:]
	csum := 16
	if proto == 6 {
		binary.BigEndian.PutUint32(t[4:], binary.BigEndian.Uint32(t[4:])+seq)
		if i < n-1 {
			t[13] &^= tcpFlagFIN | tcpFlagPSH
		}
		if i > 0 {
			t[13] &^= tcpFlagCWR
		}
	} else {
		binary.BigEndian.PutUint16(t[4:], uint16(len(t)))
		csum = 6
	}
	t[csum], t[csum+1] = 0, 0
	c := ^Checksum(t, PseudoHeaderChecksum(proto, src, dst, len(t)))
	if c == 0 && proto == 17 {
		c = 0xffff // RFC 768: a computed zero is sent as all ones
	}
	binary.BigEndian.PutUint16(t[csum:], c)
}

// CompleteChecksum finishes a transport checksum that a sender left
// partial: the field at start+offset holds the pseudo-header's sum, and the
// sum of pkt[start:] is folded into it. A computed zero is written as all
// ones, which UDP requires (RFC 768) and TCP reads alike. It reports false
// when the field lies outside pkt.
func CompleteChecksum(pkt []byte, start, offset int) bool {
	at := start + offset
	if start < 0 || offset < 0 || at+2 > len(pkt) {
		return false
	}
	c := ^Checksum(pkt[start:], 0)
	if c == 0 {
		c = 0xffff
	}
	binary.BigEndian.PutUint16(pkt[at:], c)
	return true
}
