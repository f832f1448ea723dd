package packet

import (
	"net/netip"
	"strconv"
	"testing"
)

func BenchmarkDecode(b *testing.B) {
	pkts := []struct {
		name string
		b    []byte
	}{
		{"IPv4_TCP", v4{src: "10.0.0.1", dst: "10.1.0.2", proto: ProtoTCP}.build(tcp(40000, 443, TCPFlagACK, nil, make([]byte, 1400)))},
		{"IPv4_UDP", v4{src: "10.0.0.1", dst: "10.1.0.2", proto: ProtoUDP}.build(udp(40000, 53, 1, make([]byte, 1400)))},
		{"IPv6_TCP", v6{src: "fd00::1", dst: "fd01::2", next: ProtoTCP}.build(tcp(40000, 443, TCPFlagACK, nil, make([]byte, 1400)))},
		{"IPv6_ext_UDP", v6{src: "fd00::1", dst: "fd01::2", next: ipv6HopByHop, ext: cat(ext6(ipv6DestOptions), ext6(ProtoUDP))}.build(udp(1, 2, 1, make([]byte, 1400)))},
	}
	for _, pk := range pkts {
		b.Run(pk.name, func(b *testing.B) {
			var p Parsed
			b.ReportAllocs()
			b.SetBytes(int64(len(pk.b)))
			for b.Loop() {
				p.Decode(pk.b)
			}
		})
	}
}

func BenchmarkChecksum(b *testing.B) {
	for _, n := range []int{40, 1500, 9000} {
		buf := make([]byte, n)
		for i := range buf {
			buf[i] = byte(i)
		}
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(n))
			for b.Loop() {
				Checksum(buf, 0)
			}
		})
	}
}

// BenchmarkRewrite measures a source NAT: address and port, with the IPv4
// header and upper-layer checksums updated incrementally.
func BenchmarkRewrite(b *testing.B) {
	pkts := []struct {
		name string
		b    []byte
	}{
		{"IPv4_TCP", v4{src: "10.0.0.1", dst: "10.1.0.2", proto: ProtoTCP}.build(tcp(40000, 443, TCPFlagACK, nil, make([]byte, 1400)))},
		{"IPv4_UDP", v4{src: "10.0.0.1", dst: "10.1.0.2", proto: ProtoUDP}.build(udp(40000, 53, 1, make([]byte, 1400)))},
		{"IPv6_TCP", v6{src: "fd00::1", dst: "fd01::2", next: ProtoTCP}.build(tcp(40000, 443, TCPFlagACK, nil, make([]byte, 1400)))},
	}
	for _, pk := range pkts {
		b.Run(pk.name, func(b *testing.B) {
			var p Parsed
			p.Decode(pk.b)
			g, l := addr16("242.0.0.1"), p.Src
			if p.Version == 6 {
				g = addr16("fd42::1")
			}
			b.ReportAllocs()
			b.SetBytes(int64(len(pk.b)))
			for i := 0; b.Loop(); i++ {
				if i%2 == 0 {
					SetSrcAddr(pk.b, &p, g)
					SetSrcPort(pk.b, &p, 61000)
				} else {
					SetSrcAddr(pk.b, &p, l)
					SetSrcPort(pk.b, &p, 40000)
				}
			}
		})
	}
}

func BenchmarkClampMSS(b *testing.B) {
	pkt := v4{src: "10.0.0.1", dst: "10.1.0.2", proto: ProtoTCP}.build(tcp(40000, 443, TCPFlagSYN,
		[]byte{2, 4, 5, 0xb4, 4, 2, 8, 10, 0, 0, 0, 1, 0, 0, 0, 0, 1, 3, 3, 7}, nil))
	var p Parsed
	p.Decode(pkt)
	buf := make([]byte, len(pkt))
	b.ReportAllocs()
	b.SetBytes(int64(len(pkt)))
	for b.Loop() {
		// A fresh copy each time, so that every call lowers the option.
		copy(buf, pkt)
		ClampMSS(buf, &p, 1300)
	}
}

func BenchmarkTooBig(b *testing.B) {
	orig := v6{src: "fd00::1", dst: "fd01::2", next: ProtoTCP}.build(tcp(40000, 443, TCPFlagACK, nil, make([]byte, 1400)))
	var p Parsed
	p.Decode(orig)
	dst := make([]byte, 1500)
	from := netip.MustParseAddr("fd99::1")
	b.ReportAllocs()
	b.SetBytes(int64(TooBig(dst, orig, &p, from, 1280)))
	for b.Loop() {
		TooBig(dst, orig, &p, from, 1280)
	}
}

// BenchmarkSegment cuts a 64 KB TCP super-packet, as a TUN read with
// offloads brings it, into 1388-byte segments, the first in place.
func BenchmarkSegment(b *testing.B) {
	pkt, proto, l4 := superPacket(false, true, nil, make([]byte, 47*1388), TCPFlagACK)
	out, sizes := segmentBufs(64, 16+len(pkt))
	b.ReportAllocs()
	b.SetBytes(int64(len(pkt)))
	for b.Loop() {
		copy(out[0][16:], pkt)
		Segment(out[0][16:16+len(pkt)], proto, l4, 1388, out, sizes, 16)
	}
}

// BenchmarkCoalesce joins 47 segments of one flow back into a super-packet.
func BenchmarkCoalesce(b *testing.B) {
	segs := stream(b, false, 1000, 47*1388, 1388, TCPFlagACK)
	bufs, sizes := segmentBufs(len(segs), groOff+65535)
	var c Coalescer
	b.ReportAllocs()
	b.SetBytes(47 * 1388)
	for b.Loop() {
		for i, s := range segs {
			copy(bufs[i], s)
			sizes[i] = len(s) - groOff
		}
		c.Coalesce(bufs, sizes, groOff)
	}
}

// BenchmarkCoalesceManyFlows passes a batch of 128 small segments of 128
// flows, none of which joins: the cost of matching each against the
// super-packets still open.
func BenchmarkCoalesceManyFlows(b *testing.B) {
	var segs [][]byte
	for f := range 128 {
		segs = append(segs, stream(b, false, uint16(1000+f), 100, 100, TCPFlagACK)[0])
	}
	bufs, sizes := segmentBufs(len(segs), groOff+65535)
	for i, s := range segs {
		copy(bufs[i], s)
		sizes[i] = len(s) - groOff
	}
	var c Coalescer
	b.ReportAllocs()
	for b.Loop() {
		c.Coalesce(bufs, sizes, groOff)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(segs)), "ns/packet")
}
