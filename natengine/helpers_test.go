package natengine

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/snorkel-net/snorkel/packet"
)

// fakeClock is the injected clock of the tests; safe for concurrent use.
type fakeClock struct{ ns atomic.Int64 }

var clockBase = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

func (c *fakeClock) Now() time.Time          { return clockBase.Add(time.Duration(c.ns.Load())) }
func (c *fakeClock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

// seqRand returns 1, 2, 3, ...: deterministic port search.
func seqRand() func() uint32 {
	var n atomic.Uint32
	return func() uint32 { return n.Add(1) }
}

func a16(s string) [16]byte { return addr16(netip.MustParseAddr(s)) }

func pfx(s string) netip.Prefix { return netip.MustParsePrefix(s) }
func ip(s string) netip.Addr    { return netip.MustParseAddr(s) }

// testRules: cluster A, pods 10.0.0.0/16, services 10.96.0.0/16, global
// 242.1.0.0/16, one remote at 242.2.0.0/16.
func testRules() Rules {
	return Rules{
		Local:         []netip.Prefix{pfx("10.0.0.0/16"), pfx("10.96.0.0/16"), pfx("fd00::/64")},
		Global:        pfx("242.1.0.0/16"),
		Remotes:       []netip.Prefix{pfx("242.2.0.0/16")},
		ClusterEgress: []netip.Addr{ip("242.1.0.1"), ip("242.1.0.2"), ip("242.1.0.3"), ip("242.1.0.4")},
		Pools: []EgressPool{
			{Name: "ns-blue", Kind: PoolNamespace, Members: []netip.Prefix{pfx("10.0.1.0/24")}, IPs: []netip.Addr{ip("242.1.0.50")}},
			{Name: "sel-red", Kind: PoolPodSelector, Members: []netip.Prefix{pfx("10.0.1.5/32"), pfx("10.0.3.9/32")}, IPs: []netip.Addr{ip("242.1.0.60"), ip("242.1.0.61")}},
		},
		Ingress: []Ingress{
			{Name: "web", Kind: IngressService, Global: ip("242.1.0.200"), Local: ip("10.96.0.10")},
			{Name: "db-0", Kind: IngressHeadlessPod, Global: ip("242.1.0.201"), Local: ip("10.0.2.5")},
			{Name: "db-1", Kind: IngressHeadlessPod, Global: ip("242.1.0.202"), Local: ip("10.0.1.7")},
			{Name: "db-2", Kind: IngressHeadlessPod, Global: ip("242.1.0.203"), Local: ip("10.0.3.9")},
		},
	}
}

func testRules6() Rules {
	return Rules{
		Local:         []netip.Prefix{pfx("fd00::/64"), pfx("10.0.0.0/16")},
		Global:        pfx("fd42:1::/64"),
		Remotes:       []netip.Prefix{pfx("fd42:2::/64")},
		ClusterEgress: []netip.Addr{ip("fd42:1::1")},
		Ingress: []Ingress{
			{Name: "web6", Kind: IngressService, Global: ip("fd42:1::200"), Local: ip("fd00::10")},
		},
	}
}

type testEngine struct {
	*Engine
	clock *fakeClock
}

func newTestEngine(t testing.TB, cfg Config, r Rules) *testEngine {
	t.Helper()
	c := &fakeClock{}
	cfg.Now = c.Now
	if cfg.Rand == nil {
		cfg.Rand = seqRand()
	}
	e, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.SetRules(r); err != nil {
		t.Fatal(err)
	}
	return &testEngine{e, c}
}

// egress runs a copy of b through Egress and returns the result.
func (e *testEngine) egress(t testing.TB, b []byte) ([]byte, bool) {
	t.Helper()
	return run(t, e.Engine.Egress, b)
}

func (e *testEngine) ingress(t testing.TB, b []byte) ([]byte, bool) {
	t.Helper()
	return run(t, e.Engine.Ingress, b)
}

func run(t testing.TB, fn func(int, []byte, *packet.Parsed) bool, b []byte) ([]byte, bool) {
	t.Helper()
	b = bytes.Clone(b)
	var p packet.Parsed
	if r := p.Decode(b); r != packet.DropNone {
		t.Fatalf("test packet does not decode: %v", r)
	}
	ok := fn(0, b, &p)
	if ok {
		var q packet.Parsed
		if r := q.Decode(b); r != packet.DropNone {
			t.Fatalf("translated packet does not decode: %v", r)
		}
		if q != p {
			t.Fatalf("Parsed not updated to match the bytes:\n got %+v\nwant %+v", p, q)
		}
	}
	return b, ok
}

// pkt describes a test packet.
type pkt struct {
	src, dst     string
	proto        uint8
	sport, dport uint16
	flags        uint8  // TCP
	icmpType     uint8  // ICMP: type; ports are the echo identifier
	noCsum       bool   // UDP without checksum
	id           uint32 // IP ID or IPv6 fragment ID
	fragOff      uint16 // in 8-byte units
	more         bool
	payload      []byte
	l4           []byte // overrides the built upper layer (ICMP errors)
}

var testPayload = []byte("snorkel natengine test payload, odd length!")

func (k pkt) upper() []byte {
	if k.l4 != nil {
		return k.l4
	}
	pl := k.payload
	if pl == nil {
		pl = testPayload
	}
	switch k.proto {
	case packet.ProtoTCP:
		b := make([]byte, 20+len(pl))
		binary.BigEndian.PutUint16(b[0:], k.sport)
		binary.BigEndian.PutUint16(b[2:], k.dport)
		binary.BigEndian.PutUint32(b[4:], 1000)
		b[12] = 5 << 4
		b[13] = k.flags
		binary.BigEndian.PutUint16(b[14:], 65535)
		copy(b[20:], pl)
		return b
	case packet.ProtoUDP:
		b := make([]byte, 8+len(pl))
		binary.BigEndian.PutUint16(b[0:], k.sport)
		binary.BigEndian.PutUint16(b[2:], k.dport)
		binary.BigEndian.PutUint16(b[4:], uint16(len(b)))
		copy(b[8:], pl)
		return b
	case packet.ProtoICMPv4, packet.ProtoICMPv6:
		b := make([]byte, 8+len(pl))
		b[0] = k.icmpType
		binary.BigEndian.PutUint16(b[4:], k.sport)
		binary.BigEndian.PutUint16(b[6:], 7)
		copy(b[8:], pl)
		return b
	}
	return append([]byte{}, pl...)
}

// build returns the packet with every checksum set as a sender would (the
// upper-layer one computed over the whole datagram for a first fragment).
func (k pkt) build() []byte {
	src, dst := netip.MustParseAddr(k.src), netip.MustParseAddr(k.dst)
	whole := k.upper()
	if src.Is4() {
		b := make([]byte, 20+len(whole))
		b[0] = 0x45
		binary.BigEndian.PutUint16(b[2:], uint16(len(b)))
		binary.BigEndian.PutUint16(b[4:], uint16(k.id))
		b[8], b[9] = 64, k.proto
		s4, d4 := src.As4(), dst.As4()
		copy(b[12:], s4[:])
		copy(b[16:], d4[:])
		copy(b[20:], whole)
		setL4Checksum(b, k.noCsum)
		return fragment4(b, k)
	}
	b := make([]byte, 40+len(whole))
	b[0] = 0x60
	binary.BigEndian.PutUint16(b[4:], uint16(len(whole)))
	b[6], b[7] = k.proto, 64
	s16, d16 := src.As16(), dst.As16()
	copy(b[8:], s16[:])
	copy(b[24:], d16[:])
	copy(b[40:], whole)
	setL4Checksum(b, k.noCsum)
	return fragment6(b, k)
}

func setL4Checksum(b []byte, noCsum bool) {
	if b[0]>>4 == 4 {
		packet.IPv4(b).SetChecksum(packet.IPv4(b).ComputeChecksum())
	}
	var p packet.Parsed
	if p.Decode(b) != packet.DropNone || p.IsFragment() {
		return
	}
	if p.Proto == packet.ProtoUDP && !noCsum {
		packet.UDP(b[p.IPHeaderLen:]).SetChecksum(1)
	}
	packet.RecomputeL4Checksum(b, &p)
}

// fragment4 cuts the finished datagram b to the fragment k describes: a
// fragment with more to follow holds 32 bytes of data from its offset, the
// last one the rest.
func fragment4(b []byte, k pkt) []byte {
	if !k.more && k.fragOff == 0 {
		return b
	}
	data := b[20:]
	start := int(k.fragOff) * 8
	end := len(data)
	if k.more {
		end = min(start+32, len(data))
	}
	out := append(bytes.Clone(b[:20]), data[start:end]...)
	binary.BigEndian.PutUint16(out[2:], uint16(len(out)))
	fo := k.fragOff
	if k.more {
		fo |= 0x2000
	}
	binary.BigEndian.PutUint16(out[6:], fo)
	packet.IPv4(out).SetChecksum(packet.IPv4(out).ComputeChecksum())
	return out
}

func fragment6(b []byte, k pkt) []byte {
	if !k.more && k.fragOff == 0 {
		return b
	}
	data := b[40:]
	start := int(k.fragOff) * 8
	end := len(data)
	if k.more {
		end = min(start+32, len(data))
	}
	fh := make([]byte, 8)
	fh[0] = k.proto
	fo := k.fragOff << 3
	if k.more {
		fo |= 1
	}
	binary.BigEndian.PutUint16(fh[2:], fo)
	binary.BigEndian.PutUint32(fh[4:], k.id)
	out := append(append(bytes.Clone(b[:40]), fh...), data[start:end]...)
	out[6] = 44
	binary.BigEndian.PutUint16(out[4:], uint16(len(out)-40))
	return out
}

// icmpError returns the ICMP or ICMPv6 error from src to dst, of type typ
// and code, quoting the first n bytes of orig (all of it if n is 0).
func icmpError(src, dst string, typ, code uint8, rest uint32, orig []byte, n int) []byte {
	if n == 0 || n > len(orig) {
		n = len(orig)
	}
	l4 := make([]byte, 8+n)
	l4[0], l4[1] = typ, code
	binary.BigEndian.PutUint32(l4[4:], rest)
	copy(l4[8:], orig[:n])
	proto := packet.ProtoICMPv4
	if orig[0]>>4 == 6 {
		proto = packet.ProtoICMPv6
	}
	return pkt{src: src, dst: dst, proto: proto, l4: l4}.build()
}

// checkChecksums fails t unless every checksum of unfragmented packet b
// equals a full recompute: the IPv4 header checksum, and the upper-layer
// checksum (a UDP checksum of zero stays zero).
func checkChecksums(t testing.TB, b []byte) {
	t.Helper()
	var p packet.Parsed
	if r := p.Decode(b); r != packet.DropNone {
		t.Fatalf("Decode = %v", r)
	}
	if p.IsFragment() {
		return
	}
	c := bytes.Clone(b)
	var q packet.Parsed
	q.Decode(c)
	packet.RecomputeL4Checksum(c, &q)
	if !bytes.Equal(b, c) {
		t.Errorf("checksum differs from a full recompute:\n got %x\nwant %x", b, c)
	}
}

// tuple returns the addresses and ports of packet b.
func tuple(t testing.TB, b []byte) (src, dst netip.AddrPort) {
	t.Helper()
	var p packet.Parsed
	if r := p.Decode(b); r != packet.DropNone {
		t.Fatalf("Decode = %v", r)
	}
	return netip.AddrPortFrom(p.SrcAddr(), p.SrcPort), netip.AddrPortFrom(p.DstAddr(), p.DstPort)
}

func ap(s string) netip.AddrPort { return netip.MustParseAddrPort(s) }
