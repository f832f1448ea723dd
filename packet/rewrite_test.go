package packet

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"testing"
)

// rewritable returns one packet of each kind the rewrite functions handle.
func rewritable() []struct {
	name string
	b    []byte
} {
	return []struct {
		name string
		b    []byte
	}{
		{"IPv4 TCP", v4{src: "10.0.0.1", dst: "10.1.0.2", proto: ProtoTCP}.build(tcp(40000, 443, TCPFlagACK, nil, payload))},
		{"IPv4 TCP with options", v4{src: "10.0.0.1", dst: "10.1.0.2", proto: ProtoTCP, options: []byte{1, 1, 1, 0}}.build(tcp(40000, 443, TCPFlagSYN, []byte{2, 4, 5, 0xb4}, nil))},
		{"IPv4 UDP", v4{src: "10.0.0.1", dst: "10.1.0.2", proto: ProtoUDP}.build(udp(53, 33000, 1, payload))},
		{"IPv4 UDP without checksum", v4{src: "10.0.0.1", dst: "10.1.0.2", proto: ProtoUDP}.build(udp(53, 33000, 0, payload))},
		{"IPv4 ICMP echo", v4{src: "10.0.0.1", dst: "10.1.0.2", proto: ProtoICMPv4}.build(icmp(ICMPv4EchoRequest, 0, 0x11112222, payload))},
		{"IPv4 other protocol", v4{src: "10.0.0.1", dst: "10.1.0.2", proto: 47}.build(payload)},
		{"IPv6 TCP", v6{src: "fd00::1", dst: "fd01::2", next: ProtoTCP}.build(tcp(40000, 443, TCPFlagACK, nil, payload))},
		{"IPv6 UDP after Destination Options", v6{src: "fd00::1", dst: "fd01::2", next: ipv6DestOptions, ext: ext6(ProtoUDP)}.build(udp(53, 33000, 1, payload))},
		{"IPv6 ICMPv6 echo", v6{src: "fd00::1", dst: "fd01::2", next: ProtoICMPv6}.build(icmp(ICMPv6EchoReply, 0, 0x33334444, payload))},
	}
}

type rewrite struct {
	name  string
	apply func(b []byte, p *Parsed) (undo func(b []byte, p *Parsed))
}

var rewrites = []rewrite{
	{"source address", func(b []byte, p *Parsed) func([]byte, *Parsed) {
		old := p.Src
		a := addr16("242.0.3.4")
		if p.Version == 6 {
			a = addr16("2001:db8:f00d::99")
		}
		SetSrcAddr(b, p, a)
		return func(b []byte, p *Parsed) { SetSrcAddr(b, p, old) }
	}},
	{"destination address", func(b []byte, p *Parsed) func([]byte, *Parsed) {
		old := p.Dst
		a := addr16("242.1.255.255")
		if p.Version == 6 {
			a = addr16("ffff:ffff::1")
		}
		SetDstAddr(b, p, a)
		return func(b []byte, p *Parsed) { SetDstAddr(b, p, old) }
	}},
	{"source port", func(b []byte, p *Parsed) func([]byte, *Parsed) {
		old := p.SrcPort
		SetSrcPort(b, p, 61001)
		return func(b []byte, p *Parsed) { SetSrcPort(b, p, old) }
	}},
	{"destination port", func(b []byte, p *Parsed) func([]byte, *Parsed) {
		old := p.DstPort
		SetDstPort(b, p, 1)
		return func(b []byte, p *Parsed) { SetDstPort(b, p, old) }
	}},
	{"source address and port", func(b []byte, p *Parsed) func([]byte, *Parsed) {
		old, oldPort := p.Src, p.SrcPort
		a := addr16("242.0.3.4")
		if p.Version == 6 {
			a = addr16("2001:db8:f00d::99")
		}
		SetSrc(b, p, a, 61001)
		return func(b []byte, p *Parsed) { SetSrc(b, p, old, oldPort) }
	}},
	{"destination address and port", func(b []byte, p *Parsed) func([]byte, *Parsed) {
		old, oldPort := p.Dst, p.DstPort
		a := addr16("242.1.255.255")
		if p.Version == 6 {
			a = addr16("ffff:ffff::1")
		}
		SetDst(b, p, a, 1)
		return func(b []byte, p *Parsed) { SetDst(b, p, old, oldPort) }
	}},
}

func TestRewriteKeepsChecksumsEqualToRecomputeAndReverses(t *testing.T) {
	for _, pk := range rewritable() {
		for _, rw := range rewrites {
			t.Run(pk.name+" "+rw.name, func(t *testing.T) {
				b := clone(pk.b)
				var p Parsed
				if r := p.Decode(b); r != DropNone {
					t.Fatal(r)
				}
				undo := rw.apply(b, &p)
				var again Parsed
				if r := again.Decode(b); r != DropNone {
					t.Fatalf("rewritten packet: Decode = %v", r)
				}
				if again != p {
					t.Errorf("Parsed after rewrite\n%+v\ndiffers from a fresh Decode\n%+v", p, again)
				}
				checkChecksums(t, b)
				undo(b, &p)
				if !bytes.Equal(b, pk.b) {
					t.Errorf("rewrite then reverse changed the packet:\n%x\nwant\n%x", b, pk.b)
				}
			})
		}
	}
}

func TestRewriteSpecialCases(t *testing.T) {
	t.Run("UDP zero checksum stays zero", func(t *testing.T) {
		b := v4{src: "10.0.0.1", dst: "10.1.0.2", proto: ProtoUDP}.build(udp(53, 33000, 0, payload))
		var p Parsed
		p.Decode(b)
		SetSrcAddr(b, &p, addr16("242.0.0.1"))
		SetSrcPort(b, &p, 9)
		if c := UDP(b[20:]).Checksum(); c != 0 {
			t.Errorf("UDP checksum = %#04x, want 0", c)
		}
	})
	for _, version := range []uint8{4, 6} {
		t.Run("UDP checksum computing to zero is sent as ffff over IPv"+string('0'+version), func(t *testing.T) {
			b := v4{src: "10.0.0.1", dst: "10.1.0.2", proto: ProtoUDP}.build(udp(53, 33000, 1, payload))
			if version == 6 {
				b = v6{src: "fd00::1", dst: "fd01::2", next: ProtoUDP}.build(udp(53, 33000, 1, payload))
			}
			var p Parsed
			p.Decode(b)
			// Find the source port that makes the datagram sum to 0xffff.
			u := UDP(b[p.IPHeaderLen:p.Length])
			binary.BigEndian.PutUint16(u, 0)
			rest := fold(sum(u[8:], sum(u[:6], uint64(p.pseudoHeader(len(u))))))
			binary.BigEndian.PutUint16(u, 53)
			port := ^rest
			b2, p2 := clone(b), p
			if !SetSrcPort(b, &p, port) {
				t.Fatal("SetSrcPort = false")
			}
			if c := u.Checksum(); c != 0xffff {
				t.Errorf("UDP checksum = %#04x, want 0xffff", c)
			}
			checkChecksums(t, b)
			SetSrc(b2, &p2, p2.Src, port)
			if c := UDP(b2[p2.IPHeaderLen:]).Checksum(); c != 0xffff {
				t.Errorf("UDP checksum after SetSrc = %#04x, want 0xffff", c)
			}
			checkChecksums(t, b2)
		})
	}
	t.Run("ICMP echo rewritten to all zeros gets checksum ffff", func(t *testing.T) {
		b := v4{src: "10.0.0.1", dst: "10.1.0.2", proto: ProtoICMPv4}.build(icmp(ICMPv4EchoReply, 0, 0x00050000, nil))
		var p Parsed
		p.Decode(b)
		SetSrcPort(b, &p, 0)
		if c := ICMPv4(b[20:]).Checksum(); c != 0xffff {
			t.Errorf("ICMP checksum = %#04x, want 0xffff", c)
		}
		checkChecksums(t, b)
	})
	t.Run("non-first fragment changes only the IP header", func(t *testing.T) {
		b := v4{src: "10.0.0.1", dst: "10.1.0.2", proto: ProtoTCP, frag: 8}.build(payload)
		var p Parsed
		p.Decode(b)
		SetDstAddr(b, &p, addr16("242.0.0.1"))
		if !bytes.Equal(b[20:], payload) {
			t.Errorf("fragment data changed: %q", b[20:])
		}
		if SetSrcPort(b, &p, 1) {
			t.Error("SetSrcPort on a non-first fragment = true, want false")
		}
		if !IPv4(b).IsChecksumValid() {
			t.Error("IPv4 header checksum invalid")
		}
	})
	t.Run("first fragment updates the checksum of the whole datagram", func(t *testing.T) {
		whole := udp(1000, 2000, 1, make([]byte, 40))
		full := v4{src: "10.0.0.1", dst: "10.1.0.2", proto: ProtoUDP}.build(whole)
		first := v4{src: "10.0.0.1", dst: "10.1.0.2", proto: ProtoUDP, frag: ipv4FlagMF}.build(full[20:44])
		var p Parsed
		p.Decode(first)
		SetSrcAddr(first, &p, addr16("242.0.0.7"))
		p.Decode(full)
		SetSrcAddr(full, &p, addr16("242.0.0.7"))
		if !bytes.Equal(first[20:44], full[20:44]) {
			t.Errorf("first fragment's UDP header %x, want the unfragmented datagram's %x", first[20:28], full[20:28])
		}
	})
	t.Run("other protocol has no port", func(t *testing.T) {
		b := v4{src: "10.0.0.1", dst: "10.1.0.2", proto: 47}.build(payload)
		var p Parsed
		p.Decode(b)
		if SetSrcPort(b, &p, 1) || SetDstPort(b, &p, 1) {
			t.Error("SetSrcPort or SetDstPort = true for GRE")
		}
	})
	t.Run("IPv6 destination behind a Routing header leaves the upper-layer checksum", func(t *testing.T) {
		b := v6{src: "fd00::1", dst: "fd01::2", next: ipv6Routing, ext: routing6(ProtoTCP, 1)}.build(tcp(1, 2, 0, nil, nil))
		var p Parsed
		p.Decode(b)
		c := TCP(b[p.IPHeaderLen:]).Checksum()
		SetDstAddr(b, &p, addr16("fd02::3"))
		if got := TCP(b[p.IPHeaderLen:]).Checksum(); got != c {
			t.Errorf("TCP checksum changed from %#04x to %#04x", c, got)
		}
		if RecomputeL4Checksum(b, &p) {
			t.Error("RecomputeL4Checksum = true behind a Routing header")
		}
	})
}

func TestRecomputeL4ChecksumRepairsEveryProtocol(t *testing.T) {
	for _, pk := range rewritable() {
		t.Run(pk.name, func(t *testing.T) {
			b := clone(pk.b)
			var p Parsed
			p.Decode(b)
			c, off, ok := refL4Checksum(b, &p)
			if !ok {
				if RecomputeL4Checksum(b, &p) {
					t.Error("RecomputeL4Checksum = true for a protocol without a checksum")
				}
				return
			}
			if binary.BigEndian.Uint16(b[off:]) == 0 {
				c = 0 // UDP without checksum stays so
			}
			binary.BigEndian.PutUint16(b[off:], 0x5a5a)
			if p.Proto == ProtoUDP && c == 0 {
				binary.BigEndian.PutUint16(b[off:], 0)
			}
			if !RecomputeL4Checksum(b, &p) {
				t.Fatal("RecomputeL4Checksum = false")
			}
			if got := binary.BigEndian.Uint16(b[off:]); got != c {
				t.Errorf("checksum = %#04x, want %#04x", got, c)
			}
		})
	}
}

// TestSetAddrPortMatchesSet holds SetSrc's and SetDst's short way for TCP
// and UDP to set, the general rewrite, on every kind of packet and on
// random addresses and ports: the bytes and the Parsed must come out the
// same.
func TestSetAddrPortMatchesSet(t *testing.T) {
	pks := rewritable()
	pks = append(pks, []struct {
		name string
		b    []byte
	}{
		{"IPv4 UDP first fragment", v4{src: "10.0.0.1", dst: "10.1.0.2", proto: ProtoUDP, frag: ipv4FlagMF}.build(udp(1000, 2000, 1, make([]byte, 16)))},
		{"IPv4 TCP non-first fragment", v4{src: "10.0.0.1", dst: "10.1.0.2", proto: ProtoTCP, frag: 8}.build(payload)},
		{"IPv6 TCP behind a Routing header", v6{src: "fd00::1", dst: "fd01::2", next: ipv6Routing, ext: routing6(ProtoTCP, 1)}.build(tcp(1, 2, 0, nil, nil))},
		{"IPv6 UDP without checksum", v6{src: "fd00::1", dst: "fd01::2", next: ProtoUDP}.build(udp(53, 33000, 0, payload))},
	}...)
	rng := rand.New(rand.NewPCG(1, 2))
	for _, pk := range pks {
		for _, inner := range []bool{false, true} {
			for _, n := range []int{len(pk.b), 28, 48} {
				if !inner && n != len(pk.b) || n > len(pk.b) {
					continue
				}
				for range 200 {
					b := clone(pk.b[:n])
					var p Parsed
					if inner {
						if p.DecodeInner(b) != DropNone {
							break
						}
					} else if r := p.Decode(b); r != DropNone {
						t.Fatalf("%s: Decode = %v", pk.name, r)
					}
					var a [16]byte
					binary.LittleEndian.PutUint64(a[:], rng.Uint64())
					binary.LittleEndian.PutUint64(a[8:], rng.Uint64())
					a = p.maskAddr(a)
					port := uint16(rng.Uint32())
					ref, rp := clone(b), p
					if rng.IntN(2) == 0 {
						SetSrc(b, &p, a, port)
						set(ref, &rp, rp.srcOffset(), &a, 0, port)
					} else {
						SetDst(b, &p, a, port)
						set(ref, &rp, rp.dstOffset(), &a, 2, port)
					}
					if !bytes.Equal(b, ref) || p != rp {
						t.Fatalf("%s (inner %v, %d bytes): short way\n%x %+v\nset\n%x %+v", pk.name, inner, n, b, p, ref, rp)
					}
				}
			}
		}
	}
}

func TestRewriteAllocatesNothing(t *testing.T) {
	b := v4{src: "10.0.0.1", dst: "10.1.0.2", proto: ProtoTCP}.build(tcp(40000, 443, TCPFlagACK, nil, payload))
	var p Parsed
	p.Decode(b)
	a, o := addr16("242.0.0.1"), p.Src
	allocs := testing.AllocsPerRun(100, func() {
		SetSrcAddr(b, &p, a)
		SetSrcPort(b, &p, 1)
		SetSrcAddr(b, &p, o)
		SetSrcPort(b, &p, 40000)
		SetSrc(b, &p, a, 1)
		SetDst(b, &p, o, 2)
	})
	if allocs != 0 {
		t.Errorf("%v allocations per rewrite, want 0", allocs)
	}
}

func TestIPv4ViewSettersKeepHeaderChecksum(t *testing.T) {
	b := v4{src: "10.0.0.1", dst: "10.1.0.2", proto: ProtoTCP, options: []byte{1, 1, 1, 0}}.build(tcp(1, 2, 0, nil, nil))
	h := IPv4(b)
	h.SetTTL(h.TTL() - 1)
	h.SetSrc([4]byte{242, 0, 0, 1})
	h.SetDst([4]byte{242, 1, 0, 1})
	if want := ^refSum(append(clone(b[:10]), b[12:24]...)); h.Checksum() != want {
		t.Errorf("header checksum = %#04x, recompute %#04x", h.Checksum(), want)
	}
	if h.ComputeChecksum() != h.Checksum() || !h.IsChecksumValid() {
		t.Errorf("ComputeChecksum = %#04x, field %#04x", h.ComputeChecksum(), h.Checksum())
	}
}

// Found by FuzzRewrite: a first ICMP fragment whose checksum field held
// 0xffff came back from a round trip as 0x0000. Both are one's-complement
// zero, and 0xffff cannot be right for a message that is not all zeros, so
// the round trip is owed only to checksums a sender could have computed,
// which this one is.
func TestRewriteRoundTripsAFirstICMPFragment(t *testing.T) {
	b := []byte("E0\x00\x1c00 \x000\x010000000000\x000\x00\x000000")
	IPv4(b).SetChecksum(IPv4(b).ComputeChecksum())
	var p Parsed
	if r := p.Decode(b); r != DropNone || !p.MoreFragments {
		t.Fatalf("Decode = %v, MoreFragments %v", r, p.MoreFragments)
	}
	orig := clone(b)
	SetSrcPort(b, &p, 61042)
	SetDstPort(b, &p, 60)
	SetSrcPort(b, &p, 0x3030)
	if !bytes.Equal(b, orig) {
		t.Errorf("rewrite then reverse changed the packet:\n%x\nwant\n%x", b, orig)
	}
}
