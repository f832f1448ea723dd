package packet

import (
	"bytes"
	"net/netip"
	"testing"
)

func TestTooBigWritesAValidError(t *testing.T) {
	big4 := v4{src: "10.0.0.1", dst: "10.1.0.2", proto: ProtoTCP, frag: ipv4FlagDF, id: 0x4242}.build(tcp(40000, 443, TCPFlagACK, nil, make([]byte, 1400)))
	small4 := v4{src: "10.0.0.1", dst: "10.1.0.2", proto: ProtoUDP, frag: ipv4FlagDF}.build(udp(1, 2, 1, payload))
	big6 := v6{src: "fd00::1", dst: "fd01::2", next: ProtoTCP}.build(tcp(40000, 443, TCPFlagACK, nil, make([]byte, 1400)))
	mcast6 := v6{src: "fd00::1", dst: "ff02::1", next: ProtoUDP}.build(udp(1, 2, 1, make([]byte, 1400)))
	global4 := v4{src: "242.1.0.4", dst: "242.2.0.10", proto: ProtoTCP, frag: ipv4FlagDF}.build(tcp(40000, 80, TCPFlagACK, nil, make([]byte, 1400)))
	tests := []struct {
		name      string
		orig      []byte
		from      string
		mtu       int
		wantLen   int
		wantQuote int
	}{
		{"IPv4 quote is cut to fit 576 bytes", big4, "10.255.0.1", 1400, 576, 548},
		{"IPv4 short datagram is quoted whole", small4, "10.255.0.1", 1400, 28 + len(small4), len(small4)},
		{"IPv6 quote is cut to fit 1280 bytes", big6, "fd99::1", 1280, 1280, 1232},
		{"IPv6 packet to a multicast group is answered", mcast6, "fd99::1", 1300, 1280, 1232},
		{"IPv4 between Globalnet addresses in 240/4 is answered", global4, "242.1.255.254", 1400, 576, 548},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var p, e Parsed
			if r := p.Decode(tt.orig); r != DropNone {
				t.Fatal(r)
			}
			dst := make([]byte, 1500)
			n := TooBig(dst, tt.orig, &p, netip.MustParseAddr(tt.from), tt.mtu)
			if n != tt.wantLen {
				t.Fatalf("TooBig = %d, want %d", n, tt.wantLen)
			}
			msg := dst[:n]
			if r := e.Decode(msg); r != DropNone {
				t.Fatalf("error message: Decode = %v", r)
			}
			checkChecksums(t, msg)
			if e.SrcAddr() != netip.MustParseAddr(tt.from) || e.Dst != p.Src || e.TTL != errorTTL {
				t.Errorf("error from %v to %v TTL %d, want from %v to %v TTL %d", e.SrcAddr(), e.DstAddr(), e.TTL, tt.from, p.SrcAddr(), errorTTL)
			}
			inner, ok := ICMPInner(msg, &e)
			if !ok || !bytes.Equal(inner, tt.orig[:tt.wantQuote]) {
				t.Errorf("quote is %d bytes, want the first %d of the original", len(inner), tt.wantQuote)
			}
			m := msg[e.IPHeaderLen:]
			if p.Version == 4 {
				if e.ICMPType != ICMPv4Unreachable || e.ICMPCode != ICMPv4FragNeededCode || int(ICMPv4(m).Seq()) != tt.mtu {
					t.Errorf("type %d code %d MTU %d, want 3, 4, %d", e.ICMPType, e.ICMPCode, ICMPv4(m).Seq(), tt.mtu)
				}
				if IPv4(msg).TOS() != ipv4TOSInternetControl || IPv4(msg).ID() != IPv4(tt.orig).ID() {
					t.Errorf("TOS %#x ID %#x, want %#x and the original's ID", IPv4(msg).TOS(), IPv4(msg).ID(), ipv4TOSInternetControl)
				}
			} else if e.ICMPType != ICMPv6PacketTooBig || e.ICMPCode != 0 || int(ICMPv6(m).MTU()) != tt.mtu {
				t.Errorf("type %d code %d MTU %d, want 2, 0, %d", e.ICMPType, e.ICMPCode, ICMPv6(m).MTU(), tt.mtu)
			}
		})
	}
}

func TestTooBigRefusesWhereNoErrorMayBeSent(t *testing.T) {
	tcp4 := func(src, dst string) []byte {
		return v4{src: src, dst: dst, proto: ProtoTCP, frag: ipv4FlagDF}.build(tcp(1, 2, TCPFlagACK, nil, make([]byte, 1400)))
	}
	tcp6 := func(src, dst string) []byte {
		return v6{src: src, dst: dst, next: ProtoTCP}.build(tcp(1, 2, TCPFlagACK, nil, make([]byte, 1400)))
	}
	quote := tcp4("10.0.0.1", "10.1.0.2")[:28]
	tests := []struct {
		name string
		orig []byte
		from string
		mtu  int
		dst  int
	}{
		{"ICMP error is never answered", v4{src: "10.0.0.1", dst: "10.1.0.2", proto: ProtoICMPv4}.build(icmp(ICMPv4Unreachable, 1, 0, quote)), "10.255.0.1", 1400, 1500},
		{"ICMPv6 error is never answered", v6{src: "fd00::1", dst: "fd01::2", next: ProtoICMPv6}.build(icmp(ICMPv6TimeExceeded, 0, 0, quote)), "fd99::1", 1280, 1500},
		{"IPv4 non-first fragment is not answered", v4{src: "10.0.0.1", dst: "10.1.0.2", proto: ProtoTCP, frag: 100}.build(payload), "10.255.0.1", 1400, 1500},
		{"IPv6 non-first fragment is not answered", v6{src: "fd00::1", dst: "fd01::2", next: ipv6Fragment, ext: frag6(ProtoTCP, 100, false, 1)}.build(payload), "fd99::1", 1280, 1500},
		{"IPv4 unspecified source is not answered", tcp4("0.0.0.0", "10.1.0.2"), "10.255.0.1", 1400, 1500},
		{"IPv4 loopback source is not answered", tcp4("127.0.0.1", "10.1.0.2"), "10.255.0.1", 1400, 1500},
		{"IPv4 multicast source is not answered", tcp4("224.0.0.5", "10.1.0.2"), "10.255.0.1", 1400, 1500},
		{"IPv4 broadcast source is not answered", tcp4("255.255.255.255", "10.1.0.2"), "10.255.0.1", 1400, 1500},
		{"IPv4 multicast destination is not answered", tcp4("10.0.0.1", "239.1.1.1"), "10.255.0.1", 1400, 1500},
		{"IPv4 broadcast destination is not answered", tcp4("10.0.0.1", "255.255.255.255"), "10.255.0.1", 1400, 1500},
		{"IPv6 unspecified source is not answered", tcp6("::", "fd01::2"), "fd99::1", 1280, 1500},
		{"IPv6 multicast source is not answered", tcp6("ff02::1", "fd01::2"), "fd99::1", 1280, 1500},
		{"IPv4 error needs room for 576 bytes", tcp4("10.0.0.1", "10.1.0.2"), "10.255.0.1", 1400, 575},
		{"IPv6 error needs room for 1280 bytes", tcp6("fd00::1", "fd01::2"), "fd99::1", 1280, 1279},
		{"IPv4 MTU below 68 is refused", tcp4("10.0.0.1", "10.1.0.2"), "10.255.0.1", 67, 1500},
		{"IPv4 MTU beyond 16 bits is refused", tcp4("10.0.0.1", "10.1.0.2"), "10.255.0.1", 65536, 1500},
		{"IPv6 MTU below 1280 is refused", tcp6("fd00::1", "fd01::2"), "fd99::1", 1279, 1500},
		{"IPv6 source for an IPv4 packet is refused", tcp4("10.0.0.1", "10.1.0.2"), "fd99::1", 1400, 1500},
		{"IPv4 source for an IPv6 packet is refused", tcp6("fd00::1", "fd01::2"), "10.255.0.1", 1400, 1500},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var p Parsed
			if r := p.Decode(tt.orig); r != DropNone {
				t.Fatal(r)
			}
			if n := TooBig(make([]byte, tt.dst), tt.orig, &p, netip.MustParseAddr(tt.from), tt.mtu); n != 0 {
				t.Errorf("TooBig = %d, want 0", n)
			}
		})
	}
}

func TestTooBigAllocatesNothing(t *testing.T) {
	orig := v4{src: "10.0.0.1", dst: "10.1.0.2", proto: ProtoTCP, frag: ipv4FlagDF}.build(tcp(1, 2, TCPFlagACK, nil, make([]byte, 1400)))
	var p Parsed
	p.Decode(orig)
	dst := make([]byte, 1500)
	from := netip.MustParseAddr("10.255.0.1")
	if allocs := testing.AllocsPerRun(100, func() { TooBig(dst, orig, &p, from, 1400) }); allocs != 0 {
		t.Errorf("%v allocations per TooBig, want 0", allocs)
	}
}
