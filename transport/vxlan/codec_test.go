package vxlan

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/snorkel-net/snorkel/transport"
)

var (
	macA = mac{0x02, 0xaa, 0, 0, 0, 1}
	macB = mac{0x02, 0xbb, 0, 0, 0, 2}
	ip4A = netip.MustParseAddr("198.19.1.1")
	ip4B = netip.MustParseAddr("198.19.2.7")
	ip6A = netip.MustParseAddr("2001:db8::1")
	ip6B = netip.MustParseAddr("2001:db8::2")
)

func TestEncapWritesHeadersBeforePacket(t *testing.T) {
	tests := []struct {
		name      string
		pkt       []byte
		etherType uint16
		ok        bool
	}{
		{"IPv4 gets EtherType 0x0800", ipv4(ip4A, ip4B, 17, pattern(30, 1)), etherTypeIPv4, true},
		{"IPv6 gets EtherType 0x86DD", ipv6(ip6A, ip6B, 17, pattern(30, 2)), etherTypeIPv6, true},
		{"version 5 is refused", []byte{0x50, 0, 0, 0}, 0, false},
		{"empty packet is refused", nil, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := withHeadroom(tt.pkt)
			before := bytes.Clone(b)
			f, ok := encap(b, transport.Headroom, 0x123456, macB, macA)
			if ok != tt.ok {
				t.Fatalf("encap ok = %v, want %v", ok, tt.ok)
			}
			if !ok {
				if !bytes.Equal(b, before) {
					t.Fatal("a refused packet's buffer was written")
				}
				return
			}
			want := refFrame(0x123456, macB, macA, tt.etherType, tt.pkt)
			if !bytes.Equal(f, want) {
				t.Fatalf("frame\n got % x\nwant % x", f[:headerLen], want[:headerLen])
			}
			if &f[headerLen] != &b[transport.Headroom] {
				t.Fatal("frame is not in place in the caller's buffer")
			}
		})
	}
}

func TestEncapMatchesReferenceOnRandomInput(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 1000 {
		pkt := make([]byte, 1+r.IntN(200))
		for i := range pkt {
			pkt[i] = byte(r.Uint32())
		}
		vni := r.Uint32() & maxVNI
		var dst, src mac
		binary.BigEndian.PutUint32(dst[:], r.Uint32())
		binary.BigEndian.PutUint32(src[2:], r.Uint32())
		offset := headerLen + r.IntN(transport.Headroom-headerLen+1)
		b := make([]byte, offset+len(pkt))
		copy(b[offset:], pkt)
		f, ok := encap(b, offset, vni, dst, src)
		var et uint16
		switch pkt[0] >> 4 {
		case 4:
			et = etherTypeIPv4
		case 6:
			et = etherTypeIPv6
		}
		if ok != (et != 0) {
			t.Fatalf("encap(% x) ok = %v", pkt[:1], ok)
		}
		if ok && !bytes.Equal(f, refFrame(vni, dst, src, et, pkt)) {
			t.Fatalf("encap differs from reference for vni %#x", vni)
		}
	}
}

func TestDecode(t *testing.T) {
	const vni = 1000
	v4 := ipv4(ip4A, ip4B, 17, pattern(40, 3))
	v6 := ipv6(ip6A, ip6B, 17, pattern(40, 4))
	arp := arpPacket(arpRequest, macA, ip4A, mac{}, ip4B)
	good := refFrame(vni, macB, macA, etherTypeIPv4, v4)
	withFlags := func(f []byte, flags byte) []byte {
		f = bytes.Clone(f)
		f[0] = flags
		return f
	}
	tests := []struct {
		name   string
		frame  []byte
		kind   frameKind
		reason reason
		ipLen  int
	}{
		{"IPv4 frame is accepted", good, frameIP, accepted, len(v4)},
		{"IPv6 frame is accepted", refFrame(vni, macB, macA, etherTypeIPv6, v6), frameIP, accepted, len(v6)},
		{"Ethernet padding is not part of the packet", append(bytes.Clone(good), 0, 0, 0, 0), frameIP, accepted, len(v4)},
		{"reserved bits are ignored (RFC 7348 §5)", func() []byte {
			f := withFlags(good, 0xff)
			f[1], f[7] = 0xff, 0xff
			return f
		}(), frameIP, accepted, len(v4)},
		{"ARP request is passed up", refFrame(vni, broadcast, macA, etherTypeARP, arp), frameARP, accepted, 0},
		{"empty datagram is short", nil, frameDrop, dropShort, 0},
		{"datagram ending in Ethernet header is short", good[:headerLen-1], frameDrop, dropShort, 0},
		{"I flag clear is a bad header", withFlags(good, 0), frameDrop, dropBadHeader, 0},
		{"other VNI is dropped", refFrame(vni+1, macB, macA, etherTypeIPv4, v4), frameDrop, dropBadVNI, 0},
		{"VLAN tag is unsupported", refFrame(vni, macB, macA, 0x8100, v4), frameDrop, dropUnsupportedEtherType, 0},
		{"IPv4 header cut short", good[:headerLen+19], frameDrop, dropShort, 0},
		{"IPv6 header cut short", refFrame(vni, macB, macA, etherTypeIPv6, v6[:39]), frameDrop, dropShort, 0},
		{"IPv4 total length beyond frame", good[:len(good)-1], frameDrop, dropBadIP, 0},
		{"IPv6 payload length beyond frame", refFrame(vni, macB, macA, etherTypeIPv6, v6[:len(v6)-1]), frameDrop, dropBadIP, 0},
		{"IPv6 packet under IPv4 EtherType", refFrame(vni, macB, macA, etherTypeIPv4, v6), frameDrop, dropBadIP, 0},
		{"IPv4 packet under IPv6 EtherType", refFrame(vni, macB, macA, etherTypeIPv6, append(bytes.Clone(v4), make([]byte, 20)...)), frameDrop, dropBadIP, 0},
		{"IPv4 header length below 20", func() []byte {
			f := bytes.Clone(good)
			f[headerLen] = 0x44
			return f
		}(), frameDrop, dropBadIP, 0},
		{"ARP cut short", refFrame(vni, broadcast, macA, etherTypeARP, arp[:27]), frameDrop, dropShort, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := decode(tt.frame, vni)
			if d.kind != tt.kind || d.reason != tt.reason || d.ipLen != tt.ipLen {
				t.Fatalf("decode = kind %d reason %v ipLen %d, want kind %d reason %v ipLen %d",
					d.kind, d.reason, d.ipLen, tt.kind, tt.reason, tt.ipLen)
			}
			if d.kind != frameDrop && d.src != macA {
				t.Fatalf("source MAC %v, want %v", d.src, macA)
			}
		})
	}
}

func TestAnswerARPWritesReplyInPlace(t *testing.T) {
	local := mac{0x02, 0x5e, 0x10, 0x20, 0x30, 0x40}
	req := refFrame(1000, broadcast, macA, etherTypeARP,
		arpPacket(arpRequest, macA, ip4A, mac{}, ip4B))
	req = append(req, make([]byte, 18)...) // Ethernet padding to 60 bytes
	reply, r := answerARP(req, 1000, local)
	if r != accepted {
		t.Fatalf("answerARP: %v", r)
	}
	want := []byte{
		// VXLAN: I flag, VNI 1000 (0x0003e8).
		0x08, 0, 0, 0, 0x00, 0x03, 0xe8, 0,
		// Ethernet: to the asker, from local, ARP.
		0x02, 0xaa, 0, 0, 0, 1, 0x02, 0x5e, 0x10, 0x20, 0x30, 0x40, 0x08, 0x06,
		// ARP: Ethernet, IPv4, 6, 4, reply.
		0, 1, 0x08, 0, 6, 4, 0, 2,
		// sender: local MAC, the address asked about.
		0x02, 0x5e, 0x10, 0x20, 0x30, 0x40, 198, 19, 2, 7,
		// target: the asker.
		0x02, 0xaa, 0, 0, 0, 1, 198, 19, 1, 1,
	}
	if !bytes.Equal(reply, want) {
		t.Fatalf("reply\n got % x\nwant % x", reply, want)
	}
	if &reply[0] != &req[0] {
		t.Fatal("reply not written in place")
	}
}

func TestAnswerARPIgnoresWhatNeedsNoAnswer(t *testing.T) {
	zero := netip.IPv4Unspecified()
	tests := []struct {
		name   string
		arp    []byte
		reason reason
	}{
		{"reply", arpPacket(arpReply, macA, ip4A, macB, ip4B), dropARPIgnored},
		{"announcement for the sender's own address", arpPacket(arpRequest, macA, ip4A, mac{}, ip4A), dropARPIgnored},
		{"probe from 0.0.0.0 (RFC 5227)", arpPacket(arpRequest, macA, zero, mac{}, ip4B), dropARPIgnored},
		{"multicast sender MAC", arpPacket(arpRequest, mac{0x01, 0, 0x5e, 0, 0, 1}, ip4A, mac{}, ip4B), dropARPIgnored},
		{"not IPv4", func() []byte {
			a := arpPacket(arpRequest, macA, ip4A, mac{}, ip4B)
			a[2] = 0x86
			return a
		}(), dropBadARP},
		{"hardware length 8", func() []byte {
			a := arpPacket(arpRequest, macA, ip4A, mac{}, ip4B)
			a[4] = 8
			return a
		}(), dropBadARP},
		{"cut short", arpPacket(arpRequest, macA, ip4A, mac{}, ip4B)[:27], dropShort},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := refFrame(1000, broadcast, macA, etherTypeARP, tt.arp)
			before := bytes.Clone(f)
			if _, r := answerARP(f, 1000, macB); r != tt.reason {
				t.Fatalf("answerARP reason %v, want %v", r, tt.reason)
			}
			if !bytes.Equal(f, before) {
				t.Fatal("an unanswered request was modified")
			}
		})
	}
}

func TestCodecAllocatesNothing(t *testing.T) {
	b := withHeadroom(ipv4(ip4A, ip4B, 17, pattern(1400, 5)))
	if n := testing.AllocsPerRun(1000, func() {
		if _, ok := encap(b, transport.Headroom, 1000, macB, macA); !ok {
			t.Fatal("encap refused")
		}
	}); n != 0 {
		t.Errorf("encap: %v allocations, want 0", n)
	}
	f := b[transport.Headroom-headerLen:]
	if n := testing.AllocsPerRun(1000, func() {
		if d := decode(f, 1000); d.kind != frameIP {
			t.Fatal("decode refused")
		}
	}); n != 0 {
		t.Errorf("decode: %v allocations, want 0", n)
	}
	req := refFrame(1000, broadcast, macA, etherTypeARP, arpPacket(arpRequest, macA, ip4A, mac{}, ip4B))
	orig := bytes.Clone(req)
	if n := testing.AllocsPerRun(1000, func() {
		copy(req, orig)
		if _, r := answerARP(req, 1000, macB); r != accepted {
			t.Fatal("answerARP refused")
		}
	}); n != 0 {
		t.Errorf("answerARP: %v allocations, want 0", n)
	}
}

func TestDerivedMACIsStableAndLocallyAdministered(t *testing.T) {
	a := derivedMAC("node-1", 1000, 4500)
	if a != derivedMAC("node-1", 1000, 4500) {
		t.Fatal("same inputs gave different MACs")
	}
	for _, other := range []mac{derivedMAC("node-2", 1000, 4500), derivedMAC("node-1", 1001, 4500), derivedMAC("node-1", 1000, 4501)} {
		if other == a {
			t.Fatalf("different inputs gave the same MAC %v", a)
		}
	}
	for _, host := range []string{"", "a", "node-1", "kind-worker"} {
		m := derivedMAC(host, 1000, 4500)
		if m[0]&0x02 == 0 || m[0]&0x01 != 0 {
			t.Fatalf("derived MAC %v is not locally administered unicast", m)
		}
	}
}
