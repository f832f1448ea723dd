package packet

import (
	"bytes"
	"encoding/binary"
)

// maxCoalesced bounds how many segments one super-packet joins, as the
// kernel's GRO does (MAX_SKB_FRAGS-sized batches of 64 segments at most).
const maxCoalesced = 64

// maxOpen bounds the super-packets that may still take a segment, so that
// a batch of many flows costs each packet at most this many comparisons:
// opening one more closes the oldest.
const maxOpen = 8

// Super is one packet a Coalescer leaves to write: the packet in
// bufs[Index][off:off+sizes[Index]], followed, when Segments > 1, by the
// payloads of the segments in Joined, bufs[j][off+Header:off+sizes[j]] in
// that order, Len bytes in all. Nothing is copied: the device gathers the
// pieces. A joined super-packet is Segments TCP segments of SegmentSize
// payload bytes each (the last may be shorter); its headers, in the first
// buffer, carry its whole length, its transport header starts at L4 and
// its TCP checksum field holds the pseudo-header's sum for the device to
// complete (virtio-net's NEEDS_CSUM).
type Super struct {
	Index       int
	Len         int
	Segments    int
	SegmentSize int
	L4          int
	Header      int // the IP and TCP headers' length
	Joined      []int
}

// Coalescer joins consecutive TCP segments of a flow in one batch into
// super-packets, the inverse of Segment, for a device that takes TCP
// segmentation offload. Only plain data segments join: an ACK, optionally
// PSH, with payload, the same headers but for lengths, IPv4 ID and
// checksums, contiguous sequence numbers, a valid checksum, and every
// segment but the last of the same size. Anything else passes unchanged,
// and a flow's packets keep their order. The zero value is ready; it is not
// safe for concurrent use.
//
// A joined super-packet goes to the device with its checksum left to fill
// in, which the kernel takes as verified; so the Coalescer verifies each
// segment's checksum before it joins it, as the kernel's GRO does, unless
// SenderChecked says that was done.
type Coalescer struct {
	// SenderChecked says that the sender of the segments passed to Group
	// or Coalesce checked the TCP checksum of each one it could join (see
	// SegmentChecksumValid) and that they came over a path whose own
	// checksum or authentication the receiver verified, so that the
	// Coalescer joins them without summing them again.
	SenderChecked bool

	out    []Super
	heads  []groHead
	open   []int // the heads that may take a segment, oldest first
	after  []int // the segment joined after bufs[i] in its super-packet, or -1
	joined []int // the Joined lists of out, end to end
}

// groHead is a super-packet being built: its entry in out and what the
// next segment must match.
type groHead struct {
	super   int    // index in out
	key     uint64 // flowKey of its packets
	l4, hdr int
	next    uint32 // the sequence number the next segment must have
	last    int    // the index of its last segment
	open    bool   // whether it can take another segment
}

// Coalesce joins what it can of bufs[i][off:off+sizes[i]] and returns the
// packets to write in order. It writes only the joined super-packets'
// headers, in their first segments. The result is valid until the next
// call.
func (c *Coalescer) Coalesce(bufs [][]byte, sizes []int, off int) []Super {
	out := c.Group(bufs, sizes, off)
	for _, s := range out {
		s.Finish(bufs[s.Index][off : off+sizes[s.Index]])
	}
	return out
}

// Group is Coalesce but for the last step: each super-packet's headers are
// its first segment's, for the caller to rewrite (translate its addresses,
// say) before Finish makes them the whole packet's.
func (c *Coalescer) Group(bufs [][]byte, sizes []int, off int) []Super {
	c.out = c.out[:0]
	c.heads = c.heads[:0]
	c.open = c.open[:0]
	if cap(c.after) < len(bufs) {
		c.after = make([]int, len(bufs))
		c.joined = make([]int, 0, len(bufs))
	}
	c.after = c.after[:len(bufs)]
	for i := range bufs {
		c.after[i] = -1
		pkt := bufs[i][off : off+sizes[i]]
		key := flowKey(pkt)
		l4, hdr, ok := coalescible(pkt)
		if !ok {
			c.closeFlowOf(bufs, off, pkt, key)
			c.out = append(c.out, Super{Index: i, Len: len(pkt), Segments: 1})
			continue
		}
		if h := c.head(bufs, off, pkt, key, l4, hdr); h != nil && c.join(bufs, sizes, off, h, i) {
			if !h.open {
				c.prune()
			}
			continue
		}
		c.closeFlowOf(bufs, off, pkt, key)
		seq := binary.BigEndian.Uint32(pkt[l4+4:])
		c.heads = append(c.heads, groHead{super: len(c.out), key: key, l4: l4, hdr: hdr, next: seq + uint32(len(pkt)-hdr), last: i, open: pkt[l4+13]&tcpFlagPSH == 0})
		c.out = append(c.out, Super{Index: i, Len: len(pkt), Segments: 1, SegmentSize: len(pkt) - hdr, L4: l4, Header: hdr})
		if c.heads[len(c.heads)-1].open {
			if len(c.open) == maxOpen {
				c.heads[c.open[0]].open = false
				c.prune()
			}
			c.open = append(c.open, len(c.heads)-1)
		}
	}
	c.joined = c.joined[:0]
	for _, h := range c.heads {
		s := &c.out[h.super]
		if s.Segments == 1 {
			continue
		}
		start := len(c.joined)
		for j := c.after[s.Index]; j >= 0; j = c.after[j] {
			c.joined = append(c.joined, j)
		}
		s.Joined = c.joined[start:len(c.joined):len(c.joined)]
	}
	return c.out
}

// coalescible reports whether pkt is a TCP data segment that may join a
// super-packet, and where its transport header and payload start.
func coalescible(pkt []byte) (l4, hdr int, ok bool) {
	if len(pkt) < 20 {
		return 0, 0, false
	}
	switch pkt[0] >> 4 {
	case 4:
		l4 = int(pkt[0]&0x0f) * 4
		// Only whole, unfragmented, DF packets: the device gives the
		// segments it cuts IDs of its own.
		if l4 < 20 || pkt[9] != 6 || int(binary.BigEndian.Uint16(pkt[2:])) != len(pkt) || binary.BigEndian.Uint16(pkt[6:]) != ipv4FlagDF {
			return 0, 0, false
		}
	case 6:
		l4 = 40
		if len(pkt) < 40 || pkt[6] != 6 || int(binary.BigEndian.Uint16(pkt[4:]))+40 != len(pkt) {
			return 0, 0, false
		}
	default:
		return 0, 0, false
	}
	if len(pkt) < l4+20 {
		return 0, 0, false
	}
	hdr = l4 + int(pkt[l4+12]>>4)*4
	if hdr < l4+20 || hdr >= len(pkt) || pkt[l4+13]&^tcpFlagPSH != TCPFlagACK {
		return 0, 0, false
	}
	return l4, hdr, true
}

// head returns the open super-packet of pkt's flow whose headers pkt
// matches and whose next sequence number pkt carries, or nil.
func (c *Coalescer) head(bufs [][]byte, off int, pkt []byte, key uint64, l4, hdr int) *groHead {
	for _, k := range c.open {
		h := &c.heads[k]
		if h.key != key || h.l4 != l4 || h.hdr != hdr {
			continue
		}
		s := &c.out[h.super]
		first := bufs[s.Index][off:]
		if !sameFlow(first, l4, pkt, l4) {
			continue
		}
		if binary.BigEndian.Uint32(pkt[l4+4:]) != h.next || !sameHeaders(first, pkt, l4, hdr) {
			return nil
		}
		return h
	}
	return nil
}

// closeFlowOf ends the open super-packet of pkt's flow, whose flowKey is
// key, if any, so that nothing after pkt joins a packet written before it.
func (c *Coalescer) closeFlowOf(bufs [][]byte, off int, pkt []byte, key uint64) {
	for _, k := range c.open {
		h := &c.heads[k]
		if h.key == key && sameFlow(bufs[c.out[h.super].Index][off:], h.l4, pkt, l4Of(pkt)) {
			h.open = false
		}
	}
	c.prune()
}

// prune drops the heads that can take no more segments from the open list.
func (c *Coalescer) prune() {
	kept := c.open[:0]
	for _, k := range c.open {
		if c.heads[k].open {
			kept = append(kept, k)
		}
	}
	c.open = kept
}

// flowKey mixes pkt's addresses and the first four bytes after its IP
// header (a TCP or UDP packet's ports) into a number that differs between
// most flows and is the same for all packets of one, so that matching a
// packet against a super-packet rarely needs to compare their bytes.
func flowKey(pkt []byte) uint64 {
	const k1, k2, k3 = 0x9e3779b97f4a7c15, 0xc2b2ae3d27d4eb4f, 0x165667b19e3779f9
	l4 := l4Of(pkt)
	if l4 < 20 || len(pkt) < l4+4 {
		return 0
	}
	ports := uint64(binary.BigEndian.Uint32(pkt[l4:]))
	if pkt[0]>>4 == 4 {
		return binary.BigEndian.Uint64(pkt[12:]) ^ ports*k1
	}
	return binary.BigEndian.Uint64(pkt[8:]) ^ binary.BigEndian.Uint64(pkt[16:])*k1 ^
		binary.BigEndian.Uint64(pkt[24:])*k2 ^ binary.BigEndian.Uint64(pkt[32:])*k3 ^ ports
}

// l4Of returns where the transport header of IP packet pkt starts, not
// counting IPv6 extension headers.
func l4Of(pkt []byte) int {
	if len(pkt) > 0 && pkt[0]>>4 == 4 {
		return int(pkt[0]&0x0f) * 4
	}
	return 40
}

// join adds segment i, bufs[i][off:off+sizes[i]], to h's super-packet if
// it fits and, unless their sender checked them, the checksums of both
// verify, and reports whether it did.
func (c *Coalescer) join(bufs [][]byte, sizes []int, off int, h *groHead, i int) bool {
	s := &c.out[h.super]
	pkt := bufs[i][off : off+sizes[i]]
	payload := len(pkt) - h.hdr
	if payload > s.SegmentSize || s.Segments >= maxCoalesced || s.Len+payload > 65535 || !c.SenderChecked && !validTCPChecksum(pkt, h.l4) {
		return false
	}
	first := bufs[s.Index][off : off+sizes[s.Index]]
	if s.Segments == 1 && !c.SenderChecked && !validTCPChecksum(first, h.l4) {
		h.open = false
		return false
	}
	c.after[h.last] = i
	h.last = i
	s.Len += payload
	s.Segments++
	h.next += uint32(payload)
	if pkt[h.l4+13]&tcpFlagPSH != 0 {
		first[h.l4+13] |= tcpFlagPSH
		h.open = false
	}
	if payload < s.SegmentSize {
		h.open = false
	}
	return true
}

// sameFlow reports whether a and b, with transport headers at al4 and bl4,
// share addresses and ports.
func sameFlow(a []byte, al4 int, b []byte, bl4 int) bool {
	if len(a) < al4+4 || len(b) < bl4+4 || len(b) < 20 || a[0]>>4 != b[0]>>4 {
		return false
	}
	if a[0]>>4 == 4 {
		return bytes.Equal(a[12:20], b[12:20]) && bytes.Equal(a[al4:al4+4], b[bl4:bl4+4])
	}
	return bytes.Equal(a[8:40], b[8:40]) && bytes.Equal(a[al4:al4+4], b[bl4:bl4+4])
}

// sameHeaders reports whether b's headers match a's in everything a
// device repeats on each segment it cuts: the IP header but for lengths,
// ID and checksum, and the TCP acknowledgment, offset, flags but PSH,
// window and options.
func sameHeaders(a, b []byte, l4, hdr int) bool {
	if a[0]>>4 == 4 {
		if a[1] != b[1] || a[8] != b[8] || !bytes.Equal(a[20:l4], b[20:l4]) {
			return false
		}
	} else if binary.BigEndian.Uint32(a[0:]) != binary.BigEndian.Uint32(b[0:]) || a[7] != b[7] {
		return false
	}
	return a[l4+13]&tcpFlagPSH == 0 && bytes.Equal(a[l4+8:l4+13], b[l4+8:l4+13]) &&
		bytes.Equal(a[l4+14:l4+16], b[l4+14:l4+16]) && bytes.Equal(a[l4+18:hdr], b[l4+18:hdr])
}

// SegmentChecksumValid reports whether pkt, if it is a TCP segment that a
// Coalescer could join, has a TCP checksum that verifies; any other packet
// passes. A sender that checks every packet it sends with it lets a
// receiver's Coalescer set SenderChecked.
func SegmentChecksumValid(pkt []byte) bool {
	l4, _, ok := coalescible(pkt)
	return !ok || validTCPChecksum(pkt, l4)
}

// validTCPChecksum reports whether the TCP checksum of pkt verifies.
func validTCPChecksum(pkt []byte, l4 int) bool {
	src, dst := pkt[8:24], pkt[24:40]
	if pkt[0]>>4 == 4 {
		src, dst = pkt[12:16], pkt[16:20]
	}
	return Checksum(pkt[l4:], PseudoHeaderChecksum(6, src, dst, len(pkt)-l4)) == 0xffff
}

// Finish gives the headers of joined super-packet s, in first, its first
// segment, the whole packet's lengths, a valid IPv4 header checksum and a
// TCP checksum field holding the pseudo-header's sum. Other packets it
// leaves as they are.
func (s Super) Finish(first []byte) {
	if s.Segments < 2 {
		return
	}
	src, dst := first[8:24], first[24:40]
	if first[0]>>4 == 4 {
		binary.BigEndian.PutUint16(first[2:], uint16(s.Len))
		first[10], first[11] = 0, 0
		binary.BigEndian.PutUint16(first[10:], ^Checksum(first[:s.L4], 0))
		src, dst = first[12:16], first[16:20]
	} else {
		binary.BigEndian.PutUint16(first[4:], uint16(s.Len-40))
	}
	binary.BigEndian.PutUint16(first[s.L4+16:], PseudoHeaderChecksum(6, src, dst, s.Len-s.L4))
}
