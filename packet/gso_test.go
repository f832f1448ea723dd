package packet

import (
	"bytes"
	"encoding/binary"
	"testing"
)

// refSegment is the slow reference for Segment: each segment is the
// super-packet's headers and its share of the payload, with every field a
// device rewrites set one at a time and the checksums from scratch.
func refSegment(pkt []byte, proto uint8, l4, size int) [][]byte {
	hdr := l4 + 8
	if proto == ProtoTCP {
		hdr = l4 + int(pkt[l4+12]>>4)*4
	}
	var segs [][]byte
	for start := hdr; start < len(pkt) || len(segs) == 0; start += size {
		end := min(start+size, len(pkt))
		seg := append(append([]byte{}, pkt[:hdr]...), pkt[start:end]...)
		i := len(segs)
		last := end == len(pkt)
		if seg[0]>>4 == 4 {
			binary.BigEndian.PutUint16(seg[2:], uint16(len(seg)))
			binary.BigEndian.PutUint16(seg[4:], binary.BigEndian.Uint16(pkt[4:])+uint16(i))
		} else {
			binary.BigEndian.PutUint16(seg[4:], uint16(len(seg)-IPv6HeaderLen))
		}
		if proto == ProtoTCP {
			binary.BigEndian.PutUint32(seg[l4+4:], binary.BigEndian.Uint32(pkt[l4+4:])+uint32(start-hdr))
			if !last {
				seg[l4+13] &^= tcpFlagFIN | tcpFlagPSH
			}
			if i > 0 {
				seg[l4+13] &^= tcpFlagCWR
			}
		} else {
			binary.BigEndian.PutUint16(seg[l4+4:], uint16(len(seg)-l4))
			seg[l4+6] = 1 // any non-zero value: fixChecksums then fills it
		}
		fixChecksums(seg)
		segs = append(segs, seg)
	}
	return segs
}

// superPacket builds a TCP or UDP super-packet whose transport checksum
// holds garbage, as one read from a device with offloads may.
func superPacket(ipv6, isTCP bool, opts, payload []byte, flags uint8) (pkt []byte, proto uint8, l4 int) {
	var l []byte
	proto = ProtoUDP
	if isTCP {
		proto = ProtoTCP
		l = tcp(40000, 5201, flags, opts, payload)
	} else {
		l = udp(40000, 5201, 1, payload)
	}
	if ipv6 {
		pkt = v6{src: "fd00::1", dst: "fd00:1::2", next: proto}.build(l)
		l4 = IPv6HeaderLen
	} else {
		pkt = v4{src: "10.0.0.1", dst: "10.1.0.2", proto: proto, id: 0xfff0, frag: ipv4FlagDF}.build(l)
		l4 = IPv4MinHeaderLen
	}
	c := l4 + 16
	if !isTCP {
		c = l4 + 6
	}
	pkt[c], pkt[c+1] = 0xab, 0xcd
	return pkt, proto, l4
}

// segmentBufs returns n buffers of size bytes.
func segmentBufs(n, size int) ([][]byte, []int) {
	out := make([][]byte, n)
	for i := range out {
		out[i] = make([]byte, size)
	}
	return out, make([]int, n)
}

// checkSegments fails t unless out holds exactly what refSegment makes of
// pkt, which Segment has been asked to cut n ways.
func checkSegments(t *testing.T, want [][]byte, out [][]byte, sizes []int, off, n int) {
	t.Helper()
	if n != len(want) {
		t.Fatalf("Segment made %d segments, want %d", n, len(want))
	}
	for i := range n {
		got := out[i][off : off+sizes[i]]
		if len(got) != len(want[i]) {
			t.Fatalf("segment %d is %d bytes, want %d", i, len(got), len(want[i]))
		}
		for k := range got {
			if got[k] != want[i][k] {
				t.Fatalf("segment %d differs first at byte %d: %x, want %x", i, k, got[k:min(k+2, len(got))], want[i][k:min(k+2, len(got))])
			}
		}
	}
}

func TestSegmentMatchesReference(t *testing.T) {
	payload := make([]byte, 3000)
	for i := range payload {
		payload[i] = byte(i * 7)
	}
	ts := []byte{1, 1, 8, 10, 0, 0, 0, 1, 0, 0, 0, 2}
	for _, tc := range []struct {
		name    string
		ipv6    bool
		tcp     bool
		opts    []byte
		flags   uint8
		size    int
		payload int
	}{
		{name: "TCP over IPv4 in three segments, the last shorter", tcp: true, flags: TCPFlagACK | tcpFlagPSH, size: 1000, payload: 2500},
		{name: "TCP over IPv6 with timestamps", ipv6: true, tcp: true, opts: ts, flags: TCPFlagACK, size: 1388, payload: 3000},
		{name: "FIN and PSH move to the last segment, CWR stays on the first", tcp: true, flags: TCPFlagACK | tcpFlagFIN | tcpFlagPSH | tcpFlagCWR, size: 700, payload: 2100},
		{name: "UDP over IPv4", size: 1200, payload: 3000},
		{name: "UDP over IPv6, one segment", ipv6: true, size: 1400, payload: 100},
		{name: "a payload of exactly two segments", tcp: true, flags: TCPFlagACK, size: 1500, payload: 3000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pkt, proto, l4 := superPacket(tc.ipv6, tc.tcp, tc.opts, payload[:tc.payload], tc.flags)
			want := refSegment(pkt, proto, l4, tc.size)
			for _, c := range want {
				checkChecksums(t, c)
			}
			const off = 16
			out, sizes := segmentBufs(8, off+len(pkt))
			n := Segment(pkt, proto, l4, tc.size, out, sizes, off)
			checkSegments(t, want, out, sizes, off, n)

			// In place: the first segment is the super-packet's own buffer.
			out, sizes = segmentBufs(8, off+len(pkt))
			copy(out[0][off:], pkt)
			n = Segment(out[0][off:off+len(pkt)], proto, l4, tc.size, out, sizes, off)
			checkSegments(t, want, out, sizes, off, n)
		})
	}
}

// checkRounds cuts pkt with SegmentFrom into per buffers at a time, as a
// device read does with more segments than its caller's buffers, and
// checks every round against refSegment.
func checkRounds(t *testing.T, pkt []byte, proto uint8, l4, size, per int) {
	t.Helper()
	want := refSegment(pkt, proto, l4, size)
	out, sizes := segmentBufs(per, len(pkt))
	for first := 0; first < len(want); {
		n := SegmentFrom(pkt, proto, l4, size, first, out, sizes, 0)
		if n != min(per, len(want)-first) {
			t.Fatalf("SegmentFrom(first %d) = %d, want %d of %d", first, n, min(per, len(want)-first), len(want))
		}
		checkSegments(t, want[first:first+n], out, sizes, 0, n)
		first += n
	}
	if n := SegmentFrom(pkt, proto, l4, size, len(want), out, sizes, 0); n != 0 {
		t.Fatalf("SegmentFrom past the last segment = %d, want 0", n)
	}
}

func TestSegmentFromCutsInRounds(t *testing.T) {
	for _, ipv6 := range []bool{false, true} {
		pkt, proto, l4 := superPacket(ipv6, true, nil, make([]byte, 5000), TCPFlagACK|tcpFlagPSH|tcpFlagCWR)
		checkRounds(t, pkt, proto, l4, 300, 4)
		pkt, proto, l4 = superPacket(ipv6, false, nil, make([]byte, 5000), 0)
		checkRounds(t, pkt, proto, l4, 1000, 2)
	}
}

func TestSegmentRefuses(t *testing.T) {
	pkt, proto, l4 := superPacket(false, true, nil, make([]byte, 3000), TCPFlagACK)
	out, sizes := segmentBufs(8, 2000)
	for _, tc := range []struct {
		name  string
		pkt   []byte
		proto uint8
		l4    int
		size  int
		out   [][]byte
	}{
		{name: "more segments than buffers", pkt: pkt, proto: proto, l4: l4, size: 100, out: out},
		{name: "a segment size of zero", pkt: pkt, proto: proto, l4: l4, size: 0, out: out},
		{name: "buffers too short for a segment", pkt: pkt, proto: proto, l4: l4, size: 1000, out: [][]byte{make([]byte, 100), make([]byte, 100), make([]byte, 100)}},
		{name: "a transport header past the IPv4 header's end", pkt: pkt, proto: proto, l4: 24, size: 1000, out: out},
		{name: "a protocol other than the header's", pkt: pkt, proto: ProtoUDP, l4: l4, size: 1000, out: out},
		{name: "a TCP header cut short", pkt: pkt[:l4+10], proto: proto, l4: l4, size: 1000, out: out},
		{name: "an IPv6 transport header inside the fixed header", pkt: append([]byte{0x60}, make([]byte, 100)...), proto: ProtoUDP, l4: 20, size: 1000, out: out},
		{name: "no IP version", pkt: []byte{0x10, 0, 0}, proto: ProtoUDP, l4: 20, size: 1000, out: out},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if n := Segment(tc.pkt, tc.proto, tc.l4, tc.size, tc.out, sizes, 0); n != 0 {
				t.Fatalf("Segment = %d, want 0", n)
			}
		})
	}
}

func TestCompleteChecksumFinishesAPartialSum(t *testing.T) {
	for _, ipv6 := range []bool{false, true} {
		pkt, _, l4 := superPacket(ipv6, true, nil, []byte("partial checksum"), TCPFlagACK)
		want := append([]byte{}, pkt...)
		fixChecksums(want)
		src, dst := pkt[12:16], pkt[16:20]
		if ipv6 {
			src, dst = pkt[8:24], pkt[24:40]
		}
		binary.BigEndian.PutUint16(pkt[l4+16:], PseudoHeaderChecksum(ProtoTCP, src, dst, len(pkt)-l4))
		if !CompleteChecksum(pkt, l4, 16) {
			t.Fatal("CompleteChecksum refused a field inside the packet")
		}
		if !bytes.Equal(pkt, want) {
			t.Fatalf("ipv6=%v: got %x, want %x", ipv6, pkt, want)
		}
		if CompleteChecksum(pkt, len(pkt)-1, 0) || CompleteChecksum(pkt, -1, 0) {
			t.Fatal("CompleteChecksum wrote a field outside the packet")
		}
	}
}

func FuzzSegment(f *testing.F) {
	f.Add([]byte("a payload that is cut into segments"), false, true, uint8(2), uint16(7), uint8(TCPFlagACK|tcpFlagPSH))
	f.Add(make([]byte, 3000), true, true, uint8(3), uint16(1388), uint8(TCPFlagACK|tcpFlagFIN))
	f.Add(make([]byte, 2000), false, false, uint8(0), uint16(1000), uint8(0))
	f.Add([]byte{}, true, false, uint8(0), uint16(1), uint8(0))
	f.Fuzz(func(t *testing.T, payload []byte, ipv6, isTCP bool, optWords uint8, size uint16, flags uint8) {
		opts := make([]byte, int(optWords%11)*4)
		for i := range opts {
			opts[i] = 1 // NOP
		}
		if len(payload) > 9000 {
			payload = payload[:9000]
		}
		pkt, proto, l4 := superPacket(ipv6, isTCP, opts, payload, flags)
		seg := 1 + int(size)%2000
		const off = 8
		out, sizes := segmentBufs(16, off+len(pkt))
		copy(out[0][off:], pkt)
		n := Segment(out[0][off:off+len(pkt)], proto, l4, seg, out, sizes, off)
		need := max(1, (len(payload)+seg-1)/seg)
		if need > len(out) {
			if n != 0 {
				t.Fatalf("Segment = %d with %d buffers for %d segments", n, len(out), need)
			}
		} else {
			checkSegments(t, refSegment(pkt, proto, l4, seg), out, sizes, off, n)
		}
		if need <= 300 {
			checkRounds(t, pkt, proto, l4, seg, 7)
		}
	})
}
