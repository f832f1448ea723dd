package packet

import (
	"encoding/binary"
	"net/netip"
	"testing"
)

func TestDecodeAcceptsWellFormedPackets(t *testing.T) {
	tcp4 := v4{src: "10.0.0.1", dst: "10.1.0.2", proto: ProtoTCP, id: 7, frag: ipv4FlagDF}
	tests := []struct {
		name string
		b    []byte
		want Parsed
	}{
		{
			name: "IPv4 TCP SYN gives ports, flags and DF",
			b:    tcp4.build(tcp(40000, 443, TCPFlagSYN, nil, nil)),
			want: Parsed{Version: 4, Proto: ProtoTCP, Src: addr16("10.0.0.1"), Dst: addr16("10.1.0.2"),
				IPHeaderLen: 20, Length: 40, SrcPort: 40000, DstPort: 443, TCPFlags: TCPFlagSYN, TTL: 64,
				DontFragment: true, FragID: 7},
		},
		{
			name: "IPv4 options are skipped to reach UDP",
			b: v4{src: "10.0.0.1", dst: "10.1.0.2", proto: ProtoUDP, ttl: 9, options: []byte{1, 1, 1, 0}}.
				build(udp(53, 5353, 1, payload)),
			want: Parsed{Version: 4, Proto: ProtoUDP, Src: addr16("10.0.0.1"), Dst: addr16("10.1.0.2"),
				IPHeaderLen: 24, Length: 24 + 8 + len(payload), SrcPort: 53, DstPort: 5353, TTL: 9},
		},
		{
			name: "IPv4 bytes after the total length are ignored",
			b:    append(tcp4.build(tcp(1, 2, TCPFlagACK, nil, nil)), 0xde, 0xad),
			want: Parsed{Version: 4, Proto: ProtoTCP, Src: addr16("10.0.0.1"), Dst: addr16("10.1.0.2"),
				IPHeaderLen: 20, Length: 40, SrcPort: 1, DstPort: 2, TCPFlags: TCPFlagACK, TTL: 64,
				DontFragment: true, FragID: 7},
		},
		{
			name: "ICMP echo request puts the identifier in both ports",
			b:    v4{src: "10.0.0.1", dst: "10.1.0.2", proto: ProtoICMPv4}.build(icmp(ICMPv4EchoRequest, 0, 0x12340001, payload)),
			want: Parsed{Version: 4, Proto: ProtoICMPv4, Src: addr16("10.0.0.1"), Dst: addr16("10.1.0.2"),
				IPHeaderLen: 20, Length: 28 + len(payload), SrcPort: 0x1234, DstPort: 0x1234, TTL: 64,
				ICMPType: ICMPv4EchoRequest},
		},
		{
			name: "ICMP error leaves the ports zero",
			b:    v4{src: "10.0.0.1", dst: "10.1.0.2", proto: ProtoICMPv4}.build(icmp(ICMPv4TimeExceeded, 1, 0x12340001, payload)),
			want: Parsed{Version: 4, Proto: ProtoICMPv4, Src: addr16("10.0.0.1"), Dst: addr16("10.1.0.2"),
				IPHeaderLen: 20, Length: 28 + len(payload), TTL: 64, ICMPType: ICMPv4TimeExceeded, ICMPCode: 1},
		},
		{
			name: "IPv4 first fragment is parsed to the upper layer",
			b:    v4{src: "10.0.0.1", dst: "10.1.0.2", proto: ProtoUDP, id: 99, frag: ipv4FlagMF}.build(udp(1000, 2000, 1, make([]byte, 16))),
			want: Parsed{Version: 4, Proto: ProtoUDP, Src: addr16("10.0.0.1"), Dst: addr16("10.1.0.2"),
				IPHeaderLen: 20, Length: 44, SrcPort: 1000, DstPort: 2000, TTL: 64, MoreFragments: true, FragID: 99},
		},
		{
			name: "IPv4 non-first fragment has no upper-layer fields",
			b:    v4{src: "10.0.0.1", dst: "10.1.0.2", proto: ProtoUDP, id: 99, frag: 3}.build(payload),
			want: Parsed{Version: 4, Proto: ProtoUDP, Src: addr16("10.0.0.1"), Dst: addr16("10.1.0.2"),
				IPHeaderLen: 20, Length: 20 + len(payload), TTL: 64, FragOffset: 3, FragID: 99},
		},
		{
			name: "IPv4 other protocol has no ports",
			b:    v4{src: "10.0.0.1", dst: "10.1.0.2", proto: 47}.build(payload),
			want: Parsed{Version: 4, Proto: 47, Src: addr16("10.0.0.1"), Dst: addr16("10.1.0.2"),
				IPHeaderLen: 20, Length: 20 + len(payload), TTL: 64},
		},
		{
			name: "IPv6 TCP after Hop-by-Hop and Destination Options",
			b: v6{src: "fd00::1", dst: "fd01::2", next: ipv6HopByHop, hops: 3,
				ext: cat(ext6(ipv6DestOptions), ext6(ProtoTCP))}.build(tcp(1234, 80, TCPFlagSYN|TCPFlagACK, nil, payload)),
			want: Parsed{Version: 6, Proto: ProtoTCP, Src: addr16("fd00::1"), Dst: addr16("fd01::2"),
				IPHeaderLen: 56, Length: 56 + 20 + len(payload), SrcPort: 1234, DstPort: 80,
				TCPFlags: TCPFlagSYN | TCPFlagACK, TTL: 3},
		},
		{
			name: "IPv6 first fragment is parsed to the upper layer",
			b: v6{src: "fd00::1", dst: "fd01::2", next: ipv6Fragment,
				ext: frag6(ProtoUDP, 0, true, 0xabcdef01)}.build(udp(5, 6, 1, make([]byte, 24))),
			want: Parsed{Version: 6, Proto: ProtoUDP, Src: addr16("fd00::1"), Dst: addr16("fd01::2"),
				IPHeaderLen: 48, Length: 48 + 32, SrcPort: 5, DstPort: 6, TTL: 64, MoreFragments: true, FragID: 0xabcdef01},
		},
		{
			name: "IPv6 non-first fragment stops at the fragment data",
			b: v6{src: "fd00::1", dst: "fd01::2", next: ipv6Fragment,
				ext: frag6(ProtoTCP, 185, false, 42)}.build(payload),
			want: Parsed{Version: 6, Proto: ProtoTCP, Src: addr16("fd00::1"), Dst: addr16("fd01::2"),
				IPHeaderLen: 48, Length: 48 + len(payload), TTL: 64, FragOffset: 185, FragID: 42},
		},
		{
			name: "ICMPv6 echo reply after an AH header",
			b: v6{src: "fd00::1", dst: "fd01::2", next: ipv6AH,
				ext: []byte{ProtoICMPv6, 1, 0, 0, 0, 0, 0, 1, 0, 0, 0, 2}}.build(icmp(ICMPv6EchoReply, 0, 0x00070008, nil)),
			want: Parsed{Version: 6, Proto: ProtoICMPv6, Src: addr16("fd00::1"), Dst: addr16("fd01::2"),
				IPHeaderLen: 52, Length: 60, SrcPort: 7, DstPort: 7, TTL: 64, ICMPType: ICMPv6EchoReply},
		},
		{
			name: "IPv6 No Next Header ends the chain",
			b:    v6{src: "fd00::1", dst: "fd01::2", next: 59}.build(nil),
			want: Parsed{Version: 6, Proto: 59, Src: addr16("fd00::1"), Dst: addr16("fd01::2"),
				IPHeaderLen: 40, Length: 40, TTL: 64},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var p Parsed
			if r := p.Decode(tt.b); r != DropNone {
				t.Fatalf("Decode = %v, want none", r)
			}
			p.routed = false
			if p != tt.want {
				t.Errorf("Decode gave\n%+v\nwant\n%+v", p, tt.want)
			}
		})
	}
}

func TestDecodeDropsMalformedPackets(t *testing.T) {
	good4 := v4{src: "10.0.0.1", dst: "10.1.0.2", proto: ProtoTCP}.build(tcp(1, 2, 0, nil, payload))
	good6 := v6{src: "fd00::1", dst: "fd01::2", next: ProtoTCP}.build(tcp(1, 2, 0, nil, payload))
	// edit4 returns good4 changed by f, with the IPv4 header checksum fixed
	// so that only the intended fault remains.
	edit4 := func(b []byte, f func(b []byte)) []byte {
		b = clone(b)
		f(b)
		IPv4(b).SetChecksum(0)
		if hl := int(b[0]&0x0f) * 4; hl >= 20 && hl <= len(b) {
			IPv4(b).SetChecksum(^refSum(b[:hl]))
		}
		return b
	}
	edit := func(b []byte, f func(b []byte)) []byte {
		b = clone(b)
		f(b)
		return b
	}
	tests := []struct {
		name string
		b    []byte
		want DropReason
	}{
		{"empty buffer is truncated", nil, DropTruncated},
		{"version 5 is refused", []byte{0x50, 0, 0, 0}, DropBadVersion},
		{"version 0 is refused", make([]byte, 60), DropBadVersion},
		{"IPv4 shorter than 20 bytes is truncated", good4[:19], DropTruncated},
		{"IPv4 IHL below 5 is a bad header length", edit4(good4, func(b []byte) { b[0] = 0x44 }), DropBadHeaderLength},
		{"IPv4 IHL beyond the buffer is truncated", edit4(good4[:24], func(b []byte) { b[0] = 0x4f }), DropTruncated},
		{"IPv4 total length below the header is bad", edit4(good4, func(b []byte) { binary.BigEndian.PutUint16(b[2:], 19) }), DropBadTotalLength},
		{"IPv4 total length beyond the buffer is truncated", edit4(good4, func(b []byte) { binary.BigEndian.PutUint16(b[2:], uint16(len(b)+1)) }), DropTruncated},
		{"IPv4 header checksum off by one is refused", edit(good4, func(b []byte) { b[11]++ }), DropBadIPChecksum},
		{"IPv4 changed TTL without checksum fix is refused", edit(good4, func(b []byte) { b[8]-- }), DropBadIPChecksum},
		{"TCP header cut short is truncated", edit4(good4[:30], func(b []byte) { binary.BigEndian.PutUint16(b[2:], 30) }), DropTruncated},
		{"TCP data offset below 5 is bad", edit(good4, func(b []byte) { b[32] = 4 << 4 }), DropBadTCPHeader},
		{"TCP options beyond the segment are truncated", edit4(good4[:44], func(b []byte) {
			binary.BigEndian.PutUint16(b[2:], 44)
			b[32] = 15 << 4
		}), DropTruncated},
		{"UDP header cut short is truncated", edit4(v4{src: "10.0.0.1", dst: "10.1.0.2", proto: 47}.build(make([]byte, 7)), func(b []byte) { b[9] = ProtoUDP }), DropTruncated},
		{"UDP length beyond the payload is bad", edit(v4{src: "10.0.0.1", dst: "10.1.0.2", proto: ProtoUDP}.build(udp(1, 2, 0, payload)), func(b []byte) {
			binary.BigEndian.PutUint16(b[24:], uint16(8+len(payload)+1))
		}), DropBadUDPLength},
		{"UDP length below 8 is bad", edit(v4{src: "10.0.0.1", dst: "10.1.0.2", proto: ProtoUDP}.build(udp(1, 2, 0, payload)), func(b []byte) {
			binary.BigEndian.PutUint16(b[24:], 7)
		}), DropBadUDPLength},
		{"ICMP shorter than 8 bytes is truncated", edit4(v4{src: "10.0.0.1", dst: "10.1.0.2", proto: 47}.build(make([]byte, 7)), func(b []byte) { b[9] = ProtoICMPv4 }), DropTruncated},
		{"IPv4 fragment reassembling past 65535 bytes is bad", v4{src: "10.0.0.1", dst: "10.1.0.2", proto: ProtoUDP, frag: 8189}.build(make([]byte, 16)), DropBadFragment},
		{"IPv4 non-last fragment off an 8-byte boundary is bad", v4{src: "10.0.0.1", dst: "10.1.0.2", proto: ProtoUDP, frag: ipv4FlagMF | 2}.build(make([]byte, 12)), DropBadFragment},
		{"IPv4 TCP fragment at offset 1 is bad", v4{src: "10.0.0.1", dst: "10.1.0.2", proto: ProtoTCP, frag: 1}.build(make([]byte, 16)), DropBadFragment},
		{"IPv6 shorter than 40 bytes is truncated", good6[:39], DropTruncated},
		{"IPv6 payload length beyond the buffer is truncated", edit(good6, func(b []byte) { binary.BigEndian.PutUint16(b[4:], uint16(len(b)-39)) }), DropTruncated},
		{"IPv6 Hop-by-Hop after another header is bad", v6{src: "fd00::1", dst: "fd01::2", next: ipv6DestOptions,
			ext: cat(ext6(ipv6HopByHop), ext6(59))}.build(nil), DropBadExtensionHeader},
		{"IPv6 second Fragment header is bad", edit(v6{src: "fd00::1", dst: "fd01::2", next: 59}.build(cat(frag6(ipv6Fragment, 0, false, 1), frag6(59, 0, false, 1))), func(b []byte) {
			b[6] = ipv6Fragment
		}), DropBadExtensionHeader},
		{"IPv6 extension header past the payload is truncated", edit(v6{src: "fd00::1", dst: "fd01::2", next: 59}.build(make([]byte, 6)), func(b []byte) {
			b[6] = ipv6DestOptions
		}), DropTruncated},
		{"IPv6 extension header length past the payload is truncated", edit(v6{src: "fd00::1", dst: "fd01::2", next: 59}.build(make([]byte, 8)), func(b []byte) {
			b[6] = ipv6Routing
			b[41] = 1
		}), DropTruncated},
		{"IPv6 TCP header cut short is truncated", edit(good6[:50], func(b []byte) { binary.BigEndian.PutUint16(b[4:], 10) }), DropTruncated},
		{"IPv6 non-last fragment off an 8-byte boundary is bad", v6{src: "fd00::1", dst: "fd01::2", next: ipv6Fragment,
			ext: frag6(ProtoUDP, 0, true, 1)}.build(udp(1, 2, 1, make([]byte, 3))), DropBadFragment},
		{"IPv6 fragment reassembling past 65535 bytes is bad", v6{src: "fd00::1", dst: "fd01::2", next: ipv6Fragment,
			ext: frag6(ProtoUDP, 8190, false, 1)}.build(make([]byte, 16)), DropBadFragment},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var p Parsed
			if got := p.Decode(tt.b); got != tt.want {
				t.Errorf("Decode = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestDecodeResetsFieldsOfThePreviousPacket(t *testing.T) {
	var p Parsed
	if r := p.Decode(v6{src: "fd00::1", dst: "fd01::2", next: ProtoTCP}.build(tcp(1, 2, TCPFlagSYN, nil, nil))); r != DropNone {
		t.Fatal(r)
	}
	b := v4{src: "10.0.0.1", dst: "10.1.0.2", proto: 47}.build(nil)
	if r := p.Decode(b); r != DropNone {
		t.Fatal(r)
	}
	want := Parsed{Version: 4, Proto: 47, Src: addr16("10.0.0.1"), Dst: addr16("10.1.0.2"), IPHeaderLen: 20, Length: 20, TTL: 64}
	if p != want {
		t.Errorf("Decode gave %+v, want %+v", p, want)
	}
}

func TestAddrsAndFragmentState(t *testing.T) {
	tests := []struct {
		name     string
		b        []byte
		src, dst netip.Addr
		frag     bool
	}{
		{"IPv4 addresses are 4-byte Addrs", v4{src: "10.0.0.1", dst: "192.168.7.9", proto: 47}.build(nil),
			netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("192.168.7.9"), false},
		{"IPv6 addresses are 16-byte Addrs", v6{src: "fd00::1", dst: "2001:db8::ff", next: 59}.build(nil),
			netip.MustParseAddr("fd00::1"), netip.MustParseAddr("2001:db8::ff"), false},
		{"IPv4 first fragment is a fragment", v4{src: "10.0.0.1", dst: "10.0.0.2", proto: 47, frag: ipv4FlagMF}.build(make([]byte, 8)),
			netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2"), true},
		{"IPv6 atomic fragment is not a fragment", v6{src: "fd00::1", dst: "fd00::2", next: ipv6Fragment, ext: frag6(59, 0, false, 5)}.build(nil),
			netip.MustParseAddr("fd00::1"), netip.MustParseAddr("fd00::2"), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var p Parsed
			if r := p.Decode(tt.b); r != DropNone {
				t.Fatal(r)
			}
			if p.SrcAddr() != tt.src || p.DstAddr() != tt.dst {
				t.Errorf("SrcAddr, DstAddr = %v, %v, want %v, %v", p.SrcAddr(), p.DstAddr(), tt.src, tt.dst)
			}
			if p.IsFragment() != tt.frag {
				t.Errorf("IsFragment = %v, want %v", p.IsFragment(), tt.frag)
			}
		})
	}
	var zero Parsed
	if zero.SrcAddr().IsValid() {
		t.Errorf("SrcAddr of an undecoded Parsed = %v, want the zero Addr", zero.SrcAddr())
	}
}

func TestDecodeAllocatesNothing(t *testing.T) {
	pkts := [][]byte{
		v4{src: "10.0.0.1", dst: "10.1.0.2", proto: ProtoTCP}.build(tcp(1, 2, TCPFlagSYN, nil, payload)),
		v6{src: "fd00::1", dst: "fd01::2", next: ipv6HopByHop, ext: ext6(ProtoUDP)}.build(udp(1, 2, 1, payload)),
		{0x45, 0},
	}
	var p Parsed
	var sink netip.Addr
	allocs := testing.AllocsPerRun(100, func() {
		for _, b := range pkts {
			p.Decode(b)
			sink = p.SrcAddr()
			sink = p.DstAddr()
		}
	})
	if allocs != 0 {
		t.Errorf("Decode, SrcAddr, DstAddr: %v allocations per run, want 0", allocs)
	}
	_ = sink
}

func TestDecodeInnerAcceptsAQuotedPacketCutShort(t *testing.T) {
	full := v4{src: "10.0.0.1", dst: "10.1.0.2", proto: ProtoTCP}.build(tcp(40000, 443, TCPFlagACK, nil, payload))
	full6 := v6{src: "fd00::1", dst: "fd01::2", next: ProtoUDP}.build(udp(7, 8, 1, payload))
	tests := []struct {
		name    string
		b       []byte
		want    DropReason
		wantLen int
		sport   uint16
		flags   uint8
	}{
		{"IPv4 TCP quoted to 8 bytes of header gives ports", full[:28], DropNone, 28, 40000, 0},
		{"IPv4 TCP quoted to 14 bytes of header gives flags", full[:34], DropNone, 34, 40000, TCPFlagACK},
		{"IPv4 TCP quoted to 7 bytes of header is truncated", full[:27], DropTruncated, 27, 0, 0},
		{"IPv4 quote with a stale header checksum is accepted", func() []byte { b := clone(full[:28]); b[10]++; return b }(), DropNone, 28, 40000, 0},
		{"IPv6 UDP quoted to its header gives ports", full6[:48], DropNone, 48, 7, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var p Parsed
			if got := p.DecodeInner(tt.b); got != tt.want {
				t.Fatalf("DecodeInner = %v, want %v", got, tt.want)
			}
			if tt.want != DropNone {
				return
			}
			if p.Length != tt.wantLen || p.SrcPort != tt.sport || p.TCPFlags != tt.flags {
				t.Errorf("Length, SrcPort, TCPFlags = %d, %d, %#x, want %d, %d, %#x", p.Length, p.SrcPort, p.TCPFlags, tt.wantLen, tt.sport, tt.flags)
			}
			if r := p.Decode(tt.b); r == DropNone {
				t.Errorf("Decode accepted the cut-short quote")
			}
		})
	}
}
