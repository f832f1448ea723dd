package packet

import (
	"bytes"
	"net/netip"
	"testing"
)

func fuzzSeeds() [][]byte {
	orig := v4{src: "10.0.0.1", dst: "10.1.0.2", proto: ProtoTCP}.build(tcp(40000, 443, TCPFlagSYN, []byte{1, 2, 4, 5, 0xb4, 0, 0, 0}, payload))
	orig6 := v6{src: "fd00::1", dst: "fd01::2", next: ProtoUDP}.build(udp(1, 2, 1, payload))
	return [][]byte{
		orig,
		orig6,
		v4{src: "10.0.0.1", dst: "10.1.0.2", proto: ProtoUDP, frag: ipv4FlagMF}.build(udp(53, 9, 1, make([]byte, 16))),
		v4{src: "10.0.0.1", dst: "10.1.0.2", proto: ProtoUDP}.build(udp(53, 9, 0, payload)),
		v4{src: "10.0.0.1", dst: "10.1.0.2", proto: ProtoICMPv4}.build(icmp(ICMPv4EchoReply, 0, 0x00050000, nil)),
		v4{src: "10.9.9.9", dst: "10.0.0.1", proto: ProtoICMPv4}.build(icmp(ICMPv4Unreachable, ICMPv4FragNeededCode, 1400, orig[:28])),
		v6{src: "fd00::1", dst: "fd01::2", next: ipv6HopByHop, ext: cat(ext6(ipv6Routing), routing6(ipv6Fragment, 1), frag6(ProtoTCP, 0, true, 7))}.
			build(tcp(1, 2, TCPFlagSYN, []byte{2, 4, 5, 0xa0}, make([]byte, 12))),
		v6{src: "fd00::1", dst: "fd01::2", next: ProtoICMPv6}.build(icmp(ICMPv6EchoRequest, 0, 0x12340001, payload)),
		v6{src: "fd09::9", dst: "fd00::1", next: ProtoICMPv6}.build(icmp(ICMPv6PacketTooBig, 0, 1280, orig6)),
	}
}

// FuzzDecode feeds arbitrary bytes to every reader in the package: none may
// panic, and what Decode accepts must be self-consistent.
func FuzzDecode(f *testing.F) {
	for _, b := range fuzzSeeds() {
		f.Add(b, false)
	}
	f.Fuzz(func(t *testing.T, b []byte, fix bool) {
		if fix {
			// Set the checksums so that mutations reach past the IPv4
			// header checksum check.
			b = clone(b)
			fixChecksums(b)
		}
		var p, ip Parsed
		if p.DecodeInner(b) == DropNone {
			checkParsed(t, b, &p)
		}
		if p.Decode(b) != DropNone {
			return
		}
		checkParsed(t, b, &p)
		if inner, ok := ICMPInner(b, &p); ok && ip.DecodeInner(inner) == DropNone {
			checkParsed(t, inner, &ip)
			SetSrcAddr(inner, &ip, addr16("242.0.0.1"))
			SetSrcPort(inner, &ip, 7)
			RecomputeL4Checksum(b, &p)
		}
		if p.Decode(b) != DropNone {
			t.Fatal("packet no longer decodes after rewriting its ICMP quote")
		}
		MSS(b, &p)
		ClampMSS(b, &p, 536)
		dst := make([]byte, 1500)
		from := netip.MustParseAddr("10.255.0.1")
		if p.Version == 6 {
			from = netip.MustParseAddr("fd99::1")
		}
		if n := TooBig(dst, b, &p, from, 1280); n > 0 {
			checkChecksums(t, dst[:n])
		}
	})
}

func checkParsed(t *testing.T, b []byte, p *Parsed) {
	t.Helper()
	if p.Version != 4 && p.Version != 6 {
		t.Fatalf("Version = %d", p.Version)
	}
	if p.IPHeaderLen > p.Length || p.Length > len(b) {
		t.Fatalf("IPHeaderLen %d, Length %d, len %d", p.IPHeaderLen, p.Length, len(b))
	}
	if p.FragOffset != 0 && (p.SrcPort|p.DstPort != 0 || p.TCPFlags|p.ICMPType|p.ICMPCode != 0) {
		t.Fatalf("non-first fragment with upper-layer fields: %+v", p)
	}
	if p.Version == 4 && (p.Src != p.maskAddr(p.Src) || p.Dst != p.maskAddr(p.Dst)) {
		t.Fatalf("IPv4 address with bytes past the fourth: %+v", p)
	}
}

// FuzzRewrite rewrites every address and port of a packet with correct
// checksums: the checksums must equal a full recompute, and rewriting back
// must restore the packet byte for byte.
func FuzzRewrite(f *testing.F) {
	for _, b := range fuzzSeeds() {
		f.Add(b, []byte("\xf2\x00\x00\x01 global address"), uint16(61000), uint16(0))
	}
	f.Fuzz(func(t *testing.T, b, addr []byte, sport, dport uint16) {
		b = clone(b)
		if !fixChecksums(b) {
			return
		}
		var a, a2 [16]byte
		copy(a[:], addr)
		for i := range a2 {
			a2[i] = a[15-i]
		}
		var p Parsed
		p.Decode(b)
		orig, op := clone(b), p

		SetSrcAddr(b, &p, a)
		SetDstAddr(b, &p, a2)
		SetSrcPort(b, &p, sport)
		SetDstPort(b, &p, dport)
		var again Parsed
		if r := again.Decode(b); r != DropNone {
			t.Fatalf("rewritten packet: Decode = %v", r)
		}
		if again != p {
			t.Fatalf("Parsed after rewrite\n%+v\ndiffers from a fresh Decode\n%+v", p, again)
		}
		if !p.routed {
			checkChecksums(t, b)
		}

		SetDstPort(b, &p, op.DstPort)
		SetSrcPort(b, &p, op.SrcPort)
		SetDstAddr(b, &p, op.Dst)
		SetSrcAddr(b, &p, op.Src)
		if !bytes.Equal(b, orig) {
			t.Fatalf("rewrite then reverse changed the packet:\n%x\nwant\n%x", b, orig)
		}
		if p != op {
			t.Fatalf("Parsed after reverse %+v, want %+v", p, op)
		}

		// The combined rewrites give the same packet as the separate ones.
		sep := clone(b)
		sp := p
		SetSrc(b, &p, a, sport)
		SetDst(b, &p, a2, dport)
		SetSrcAddr(sep, &sp, a)
		SetSrcPort(sep, &sp, sport)
		SetDstAddr(sep, &sp, a2)
		SetDstPort(sep, &sp, dport)
		if p != sp {
			t.Fatalf("Parsed after SetSrc/SetDst\n%+v\ndiffers from the separate setters'\n%+v", p, sp)
		}
		if !p.routed {
			checkChecksums(t, b)
		}
		SetDst(b, &p, op.Dst, op.DstPort)
		SetSrc(b, &p, op.Src, op.SrcPort)
		if !bytes.Equal(b, orig) {
			t.Fatalf("SetSrc/SetDst then reverse changed the packet:\n%x\nwant\n%x", b, orig)
		}

		if ClampMSS(b, &p, 536) && !p.routed {
			checkChecksums(t, b)
		}
	})
}
