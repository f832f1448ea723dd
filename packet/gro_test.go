package packet

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"testing"
)

// groOff is the headroom the coalescing tests leave before each packet.
const groOff = 10

// stream cuts a TCP super-packet of payload bytes into segments of size
// bytes, each in its own buffer of 64 KiB behind groOff.
func stream(t testing.TB, ipv6 bool, sport uint16, payload, size int, flags uint8) [][]byte {
	t.Helper()
	data := make([]byte, payload)
	for i := range data {
		data[i] = byte(i*13 + int(sport))
	}
	pkt, proto, l4 := superPacket(ipv6, true, []byte{1, 1, 8, 10, 0, 0, 0, 1, 0, 0, 0, 2}, data, flags)
	binary.BigEndian.PutUint16(pkt[l4:], sport)
	out, sizes := segmentBufs(64, groOff+65535)
	n := Segment(pkt, proto, l4, size, out, sizes, groOff)
	if n == 0 {
		t.Fatal("Segment refused the stream")
	}
	for i := range n {
		out[i] = out[i][:groOff+sizes[i]]
	}
	return out[:n]
}

// coalesce runs a Coalescer over pkts (each bufs[i][groOff:]) and returns
// what it leaves to write, with joined packets' checksums completed as the
// device would, and how each is to be cut again.
func coalesce(pkts [][]byte) (written [][]byte, supers []Super) {
	return coalesceFrom(pkts, false)
}

// coalesceFrom is coalesce by a Coalescer told, or not, that the sender
// checked the segments.
func coalesceFrom(pkts [][]byte, senderChecked bool) (written [][]byte, supers []Super) {
	bufs := make([][]byte, len(pkts))
	sizes := make([]int, len(pkts))
	for i, p := range pkts {
		bufs[i] = make([]byte, groOff+65535)
		copy(bufs[i], p)
		sizes[i] = len(p) - groOff
	}
	c := Coalescer{SenderChecked: senderChecked}
	for _, s := range c.Coalesce(bufs, sizes, groOff) {
		written = append(written, gather(bufs, sizes, s))
		supers = append(supers, s)
	}
	return written, supers
}

// gather is what a device writes for s: its pieces end to end, with a
// joined packet's checksum completed.
func gather(bufs [][]byte, sizes []int, s Super) []byte {
	pkt := append([]byte{}, bufs[s.Index][groOff:groOff+sizes[s.Index]]...)
	for _, j := range s.Joined {
		pkt = append(pkt, bufs[j][groOff+s.Header:groOff+sizes[j]]...)
	}
	if len(pkt) != s.Len {
		panic(fmt.Sprintf("a super-packet of %d bytes gathers %d", s.Len, len(pkt)))
	}
	if s.Segments > 1 {
		CompleteChecksum(pkt, s.L4, 16)
	}
	return pkt
}

// resegment cuts what coalesce wrote back into segments as the device
// would, so that the result can be compared with what went in.
func resegment(t testing.TB, written [][]byte, supers []Super) [][]byte {
	t.Helper()
	var all [][]byte
	for k, pkt := range written {
		s := supers[k]
		if s.Segments == 1 {
			all = append(all, pkt)
			continue
		}
		out, sizes := segmentBufs(s.Segments, len(pkt))
		n := Segment(pkt, ProtoTCP, s.L4, s.SegmentSize, out, sizes, 0)
		if n != s.Segments {
			t.Fatalf("a super-packet of %d segments cut into %d", s.Segments, n)
		}
		for i := range n {
			all = append(all, out[i][:sizes[i]])
		}
	}
	return all
}

// payloads strips each of bufs to its packet, behind groOff.
func payloads(bufs [][]byte) [][]byte {
	var r [][]byte
	for _, b := range bufs {
		r = append(r, b[groOff:])
	}
	return r
}

// byFlow splits TCP packets by source port, keeping their order.
func byFlow(pkts [][]byte) map[uint16][][]byte {
	m := map[uint16][][]byte{}
	for _, p := range pkts {
		port := binary.BigEndian.Uint16(p[l4Of(p):])
		m[port] = append(m[port], p)
	}
	return m
}

func checkSame(t *testing.T, got, want [][]byte) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d packets, want %d", len(got), len(want))
	}
	for i := range got {
		if !bytes.Equal(got[i], want[i]) {
			t.Fatalf("packet %d differs:\n got %x\nwant %x", i, got[i][:min(80, len(got[i]))], want[i][:min(80, len(want[i]))])
		}
	}
}

func TestCoalesceJoinsAStreamBackIntoItsSuperPacket(t *testing.T) {
	for _, ipv6 := range []bool{false, true} {
		segs := stream(t, ipv6, 1000, 10000, 1388, TCPFlagACK|tcpFlagPSH)
		written, supers := coalesce(segs)
		if len(written) != 1 || supers[0].Segments != len(segs) || supers[0].SegmentSize != 1388 {
			t.Fatalf("ipv6=%v: %d packets, the first %+v, want one of %d segments of 1388 bytes", ipv6, len(written), supers[0], len(segs))
		}
		if !bytes.Equal(written[0][len(written[0])-10:], segs[len(segs)-1][len(segs[len(segs)-1])-10:]) {
			t.Fatal("the super-packet does not end with the last segment's payload")
		}
		checkSame(t, resegment(t, written, supers), payloads(segs))
	}
}

func TestCoalesceKeepsFlowsApartAndInOrder(t *testing.T) {
	a := stream(t, false, 1000, 4000, 1000, TCPFlagACK)
	b := stream(t, false, 2000, 4000, 1000, TCPFlagACK)
	var in [][]byte
	for i := range a {
		in = append(in, a[i], b[i])
	}
	written, supers := coalesce(in)
	if len(written) != 2 || supers[0].Segments != 4 || supers[1].Segments != 4 {
		t.Fatalf("%+v, want two packets of 4 segments", supers)
	}
	checkSame(t, resegment(t, written, supers), append(payloads(a), payloads(b)...))
}

// shorten drops k bytes from the end of the packet behind groOff in b and
// sets its lengths and checksums again.
func shorten(b []byte, k int) []byte {
	b = b[:len(b)-k]
	p := b[groOff:]
	if p[0]>>4 == 4 {
		binary.BigEndian.PutUint16(p[2:], uint16(len(p)))
	} else {
		binary.BigEndian.PutUint16(p[4:], uint16(len(p)-IPv6HeaderLen))
	}
	fixChecksums(p)
	return b
}

// pureACK turns the segment behind groOff in b into one without payload.
func pureACK(b []byte) []byte {
	p := b[groOff:]
	l4 := l4Of(p)
	return shorten(b, len(p)-(l4+int(p[l4+12]>>4)*4))
}

func TestCoalescePassesUnchanged(t *testing.T) {
	seg := func(i int) []byte { return append([]byte{}, stream(t, false, 1000, 4000, 1000, TCPFlagACK)[i]...) }
	mutate := func(i int, f func(p []byte)) []byte {
		b := seg(i)
		f(b[groOff:])
		return b
	}
	for _, tc := range []struct {
		name string
		in   [][]byte
	}{
		{name: "a segment with a bad checksum", in: [][]byte{seg(0), mutate(1, func(p []byte) { p[len(p)-1]++ })}},
		{name: "a gap in the sequence", in: [][]byte{seg(0), seg(2)}},
		{name: "segments out of order", in: [][]byte{seg(1), seg(0)}},
		{name: "a pure ACK between data segments", in: [][]byte{seg(0), pureACK(seg(0)), seg(1)}},
		{name: "different TCP options", in: [][]byte{seg(0), mutate(1, func(p []byte) { p[20+29]++; fixChecksums(p) })}},
		{name: "a FIN", in: [][]byte{seg(0), mutate(1, func(p []byte) { p[33] |= tcpFlagFIN; fixChecksums(p) })}},
		{name: "a different TTL", in: [][]byte{seg(0), mutate(1, func(p []byte) { p[8]--; fixChecksums(p) })}},
		{name: "IPv4 without DF", in: [][]byte{mutate(0, func(p []byte) { p[6] = 0; fixChecksums(p) }), mutate(1, func(p []byte) { p[6] = 0; fixChecksums(p) })}},
		{name: "a segment after a shorter one", in: [][]byte{shorten(seg(0), 10), mutate(1, func(p []byte) {
			binary.BigEndian.PutUint32(p[24:], binary.BigEndian.Uint32(p[24:])-10)
			fixChecksums(p)
		})}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			written, supers := coalesce(tc.in)
			for _, s := range supers {
				if s.Segments != 1 {
					t.Fatalf("joined %+v, want nothing joined", supers)
				}
			}
			checkSame(t, written, payloads(tc.in))
		})
	}
}

func TestSegmentChecksumValidChecksWhatACoalescerJoins(t *testing.T) {
	for _, ipv6 := range []bool{false, true} {
		seg := stream(t, ipv6, 1000, 2000, 1000, TCPFlagACK)[0][groOff:]
		bad := append([]byte{}, seg...)
		bad[len(bad)-1]++
		badACK := pureACK(append(make([]byte, groOff), bad...))[groOff:]
		badACK[len(badACK)-1]++
		for _, tc := range []struct {
			name string
			pkt  []byte
			want bool
		}{
			{"a data segment", seg, true},
			{"a data segment with a bad checksum", bad, false},
			// The Coalescer passes it alone, for the device to verify.
			{"a pure ACK with a bad checksum", badACK, true},
			{"a packet too short to be one", seg[:30], true},
		} {
			if got := SegmentChecksumValid(tc.pkt); got != tc.want {
				t.Errorf("ipv6 %v, %s: %v, want %v", ipv6, tc.name, got, tc.want)
			}
		}
	}
}

func TestCoalesceJoinsWithoutSummingWhatItsSenderChecked(t *testing.T) {
	segs := stream(t, false, 1000, 4000, 1000, TCPFlagACK)
	// A segment that no sender that checks would send: only its sum tells.
	segs[2][len(segs[2])-1]++
	for _, tc := range []struct {
		senderChecked bool
		want          []int // the segments of each packet written
	}{
		{false, []int{2, 1, 1}},
		{true, []int{4}},
	} {
		_, supers := coalesceFrom(segs, tc.senderChecked)
		var got []int
		for _, s := range supers {
			got = append(got, s.Segments)
		}
		if fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("SenderChecked %v: packets of %v segments, want %v", tc.senderChecked, got, tc.want)
		}
	}
}

func TestCoalescePassesMalformedPacketsUnchanged(t *testing.T) {
	seg := stream(t, false, 1000, 2000, 1000, TCPFlagACK)
	junk := [][]byte{{}, {0x45}, {0x41, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, {0x60, 1, 2}, make([]byte, 30)}
	in := [][]byte{seg[0]}
	for _, j := range junk {
		in = append(in, append(make([]byte, groOff), j...))
	}
	in = append(in, seg[1])
	// The junk is no flow's, so the two segments around it still join.
	written, supers := coalesce(in)
	if len(written) != len(junk)+1 || supers[0].Segments != 2 {
		t.Fatalf("%+v, want the segments joined and every other packet alone", supers)
	}
	for i, j := range junk {
		if !bytes.Equal(written[i+1], j) {
			t.Fatalf("malformed packet %d changed: % x, want % x", i, written[i+1], j)
		}
	}
}

func TestCoalesceWritesOnlyTheFirstSegmentsHeaders(t *testing.T) {
	segs := stream(t, false, 1000, 4000, 1000, TCPFlagACK)
	bufs := make([][]byte, len(segs))
	sizes := make([]int, len(segs))
	for i, s := range segs {
		bufs[i] = append(make([]byte, 0, len(s)), s...) // no room to grow
		sizes[i] = len(s) - groOff
	}
	var c Coalescer
	out := c.Coalesce(bufs, sizes, groOff)
	if len(out) != 1 || out[0].Segments != len(segs) {
		t.Fatalf("%d packets written, want 1 of %d segments", len(out), len(segs))
	}
	if want := groOff + out[0].Header; !bytes.Equal(bufs[0][want:], segs[0][want:]) {
		t.Fatal("the first segment's payload changed")
	}
	for i := 1; i < len(segs); i++ {
		if !bytes.Equal(bufs[i], segs[i]) {
			t.Fatalf("segment %d changed", i)
		}
	}
}

func TestGroupLeavesHeadersToRewriteBeforeFinish(t *testing.T) {
	for _, ipv6 := range []bool{false, true} {
		segs := stream(t, ipv6, 1000, 9000, 1000, TCPFlagACK)
		to := [16]byte{10, 7, 0, 14}
		if ipv6 {
			to = [16]byte{0xfd, 7, 15: 14}
		}
		// What a writer of each segment alone, rewritten, would send.
		var want [][]byte
		for _, sg := range segs {
			b := append([]byte{}, sg...)
			var p Parsed
			if p.Decode(b[groOff:]) != DropNone {
				t.Fatal("a segment does not decode")
			}
			SetDstAddr(b[groOff:], &p, to)
			want = append(want, b[groOff:])
		}
		bufs := make([][]byte, len(segs))
		sizes := make([]int, len(segs))
		for i, sg := range segs {
			bufs[i] = append([]byte{}, sg...)
			sizes[i] = len(sg) - groOff
		}
		var c Coalescer
		out := c.Group(bufs, sizes, groOff)
		if len(out) != 1 || out[0].Segments != len(segs) {
			t.Fatalf("ipv6 %v: %d packets, want one of %d segments", ipv6, len(out), len(segs))
		}
		s := out[0]
		first := bufs[s.Index][groOff : groOff+sizes[s.Index]]
		var p Parsed
		if p.Decode(first) != DropNone {
			t.Fatalf("ipv6 %v: the first segment's headers do not decode after Group", ipv6)
		}
		SetDstAddr(first, &p, to)
		s.Finish(first)
		pkt := gather(bufs, sizes, s)
		if !validTCPChecksum(pkt, s.L4) || (!ipv6 && Checksum(pkt[:s.L4], 0) != 0xffff) {
			t.Fatalf("ipv6 %v: the joined packet's checksums do not verify with the rewritten address", ipv6)
		}
		checkSame(t, resegment(t, [][]byte{pkt}, out), want)
	}
}

// FuzzCoalesce checks that what a Coalescer writes cuts back into what it
// was given. Told that the sender checked the segments, it is given only
// what such a sender passes (SegmentChecksumValid), and must still give it
// all back unchanged.
func FuzzCoalesce(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5}, false, false)
	f.Add([]byte{0x80, 0x41, 0x02, 0xc3, 0x14}, true, false)
	f.Add([]byte{0x20, 0x21, 0x62, 0xa3}, false, false)
	f.Add([]byte{0x10, 0x01, 0x12, 0x83, 0x94}, false, true)
	f.Add([]byte{0x20, 0x11, 0x02, 0xa3}, true, true)
	f.Fuzz(func(t *testing.T, ops []byte, ipv6, senderChecked bool) {
		if len(ops) > 64 {
			ops = ops[:64]
		}
		flows := [2][][]byte{stream(t, ipv6, 1000, 9000, 900, TCPFlagACK), stream(t, ipv6, 2000, 9000, 1000, TCPFlagACK|tcpFlagPSH)}
		var in [][]byte
		// Each op picks a flow and a segment of it, and may corrupt it,
		// turn it into a pure ACK or shorten it.
		for _, op := range ops {
			s := flows[op>>7]
			b := append([]byte{}, s[int(op&0x0f)%len(s)]...)
			p := b[groOff:]
			switch op >> 4 & 0x7 {
			case 1:
				p[len(p)-1] ^= 0x55
			case 2:
				b = pureACK(b)
			case 3:
				b = shorten(b, 7)
			}
			if senderChecked && !SegmentChecksumValid(b[groOff:]) {
				continue
			}
			in = append(in, b)
		}
		// Flows may interleave differently, but each keeps its order.
		written, supers := coalesceFrom(in, senderChecked)
		got, want := byFlow(resegment(t, written, supers)), byFlow(payloads(in))
		for port := range want {
			checkSame(t, got[port], want[port])
		}
		if len(got) != len(want) {
			t.Fatalf("%d flows written, want %d", len(got), len(want))
		}
	})
}

func TestSegmentAndCoalesceDoNotAllocate(t *testing.T) {
	pkt, proto, l4 := superPacket(false, true, nil, make([]byte, 20*1388), TCPFlagACK)
	out, sizes := segmentBufs(64, groOff+65535)
	var c Coalescer
	allocs := testing.AllocsPerRun(100, func() {
		copy(out[0][groOff:], pkt)
		n := Segment(out[0][groOff:groOff+len(pkt)], proto, l4, 1388, out, sizes, groOff)
		if s := c.Coalesce(out[:n], sizes[:n], groOff); len(s) != 1 {
			t.Fatalf("%d packets after joining, want 1", len(s))
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per segment and join, want 0", allocs)
	}
}

func TestCoalesceJoinsUpToEightFlowsAtOnce(t *testing.T) {
	for _, flows := range []int{8, 20} {
		var streams [][][]byte
		for f := range flows {
			streams = append(streams, stream(t, f%2 == 1, uint16(1000+f), 3000, 1000, TCPFlagACK))
		}
		var in [][]byte
		for i := range 3 {
			for _, s := range streams {
				in = append(in, s[i])
			}
		}
		written, supers := coalesce(in)
		got, want := byFlow(resegment(t, written, supers)), byFlow(payloads(in))
		for port := range want {
			checkSame(t, got[port], want[port])
		}
		// Eight flows stay open together; with more, each new one closes
		// the oldest before its next segment comes, and nothing joins.
		wantWritten := flows
		if flows > maxOpen {
			wantWritten = len(in)
		}
		if len(written) != wantWritten {
			t.Fatalf("%d flows: %d packets written, want %d", flows, len(written), wantWritten)
		}
	}
}
