package natengine

import (
	"bytes"
	"net/netip"
	"testing"

	"github.com/snorkel-net/snorkel/packet"
)

// checksumsRight reports whether every checksum of unfragmented packet b
// equals a full recompute (fragments count as right).
func checksumsRight(b []byte) bool {
	var p packet.Parsed
	if p.Decode(b) != packet.DropNone {
		return false
	}
	if p.IsFragment() {
		return true
	}
	c := bytes.Clone(b)
	var q packet.Parsed
	q.Decode(c)
	packet.RecomputeL4Checksum(c, &q)
	return bytes.Equal(b, c)
}

// FuzzTranslate feeds any bytes to both directions of an engine that
// already holds flows. Invariants: no panic; a translated packet still
// decodes, its Parsed matches its bytes, and checksums that were right stay
// right.
func FuzzTranslate(f *testing.F) {
	seeds := []pkt{
		{src: "10.0.0.7", dst: "242.2.0.9", proto: tcp, sport: 40000, dport: 443, flags: syn},
		{src: "242.2.0.9", dst: "242.1.0.3", proto: tcp, sport: 443, dport: 40000, flags: ack},
		{src: "242.2.0.9", dst: "242.1.0.200", proto: udp, sport: 1, dport: 53},
		{src: "10.0.0.7", dst: "242.2.0.9", proto: icmp, icmpType: packet.ICMPv4EchoRequest, sport: 3, dport: 3},
		{src: "10.0.0.7", dst: "242.2.0.9", proto: udp, sport: 5000, dport: 53, id: 4, more: true, payload: bigPayload},
		{src: "242.2.0.9", dst: "242.1.0.3", proto: udp, sport: 53, dport: 5000, id: 4, fragOff: 4, payload: bigPayload},
	}
	for _, s := range seeds {
		f.Add(s.build(), false)
		f.Add(s.build(), true)
	}
	f.Add(icmpError("242.2.0.1", "242.1.0.3", packet.ICMPv4TimeExceeded, 0, 0, seeds[0].build(), 28), true)
	e := newTestEngine(f, Config{MaxFlows: 256, MaxFragments: 16}, testRules())
	e.egress(f, seeds[0].build())
	e.egress(f, seeds[4].build())
	f.Fuzz(func(t *testing.T, b []byte, ingress bool) {
		var p packet.Parsed
		if p.Decode(b) != packet.DropNone {
			return
		}
		b = b[:p.Length]
		right := checksumsRight(b)
		fn := e.Egress
		if ingress {
			fn = e.Ingress
		}
		if !fn(0, b, &p) {
			return
		}
		checkTranslated(t, b, &p, right)
	})
}

// FuzzRoundTrip: a packet from a pod, translated out, answered, and
// translated back, returns to the pod as the exact reply of what it sent; an
// ICMP error about the translated packet returns quoting the packet as sent.
func FuzzRoundTrip(f *testing.F) {
	f.Add(uint8(tcp), byte(7), uint16(40000), uint16(443), uint8(syn), []byte("x"), false)
	f.Add(uint8(udp), byte(8), uint16(53), uint16(53), uint8(0), []byte{}, true)
	f.Add(uint8(icmp), byte(9), uint16(1), uint16(1), uint8(0), []byte("ping"), false)
	f.Add(uint8(47), byte(9), uint16(0), uint16(0), uint8(0), []byte("gre"), true)
	f.Fuzz(func(t *testing.T, proto uint8, host byte, sport, dport uint16, flags uint8, payload []byte, v6 bool) {
		if len(payload) > 1000 || proto == icmp && v6 || proto == icm6 && !v6 || v6 && ipv6ExtensionHeader(proto) {
			return
		}
		rules, src, dst, router := testRules(), "10.0.4."+itoa(host), "242.2.0.9", "242.2.0.1"
		if v6 {
			rules, src, dst, router = testRules6(), "fd00::"+itoa(host), "fd42:2::9", "fd42:2::1"
		}
		k := pkt{src: src, dst: dst, proto: proto, sport: sport, dport: dport, flags: flags &^ rst, payload: payload}
		if proto == icmp || proto == icm6 {
			k.icmpType = map[bool]uint8{false: packet.ICMPv4EchoRequest, true: packet.ICMPv6EchoRequest}[v6]
			k.dport = sport
		}
		orig := k.build()
		var p packet.Parsed
		if p.Decode(orig) != packet.DropNone || p.Proto != proto || p.IsFragment() {
			return // proto named an IPv6 extension header
		}
		e := newTestEngine(t, Config{MaxFlows: 16}, rules)
		out, ok := e.egress(t, orig)
		if !ok {
			t.Fatalf("egress dropped: %v", e.Stats().Drops)
		}
		checkChecksums(t, out)
		osrc, odst := tuple(t, out)
		if odst != netip.AddrPortFrom(p.DstAddr(), p.DstPort) {
			t.Fatal("egress changed the destination")
		}
		back, ok := e.ingress(t, k.reply(osrc, odst).build())
		if !ok {
			t.Fatalf("reply dropped: %v", e.Stats().Drops)
		}
		checkChecksums(t, back)
		bsrc, bdst := tuple(t, back)
		if bsrc != odst || bdst != netip.AddrPortFrom(p.SrcAddr(), p.SrcPort) {
			t.Fatalf("reply reached %v → %v, want %v → %v:%d", bsrc, bdst, odst, p.SrcAddr(), p.SrcPort)
		}
		typ := map[bool]uint8{false: packet.ICMPv4TimeExceeded, true: packet.ICMPv6TimeExceeded}[v6]
		em, ok := e.ingress(t, icmpError(router, osrc.Addr().String(), typ, 0, 0, out, 0))
		if !ok {
			t.Fatalf("error dropped: %v", e.Stats().Drops)
		}
		checkChecksums(t, em)
		var ep packet.Parsed
		ep.Decode(em)
		inner, _ := packet.ICMPInner(em, &ep)
		if !bytes.Equal(inner, orig[:len(inner)]) {
			t.Fatalf("quote\n%x\nwant\n%x", inner, orig[:len(inner)])
		}
	})
}

func itoa(b byte) string { return netip.AddrFrom4([4]byte{0, 0, 0, b}).String()[6:] }

// ipv6ExtensionHeader reports whether proto names an IPv6 extension header
// (RFC 8200, section 4; IANA), which a test cannot use as the upper layer.
func ipv6ExtensionHeader(proto uint8) bool {
	switch proto {
	case 0, 43, 44, 50, 51, 60, 135, 139, 140, 253, 254:
		return true
	}
	return false
}

// checkTranslated checks what every translation must keep: b still
// decodes, to what p says of it, and checksums right before are right
// after.
func checkTranslated(t *testing.T, b []byte, p *packet.Parsed, right bool) {
	t.Helper()
	var q packet.Parsed
	if r := q.Decode(b); r != packet.DropNone {
		t.Fatalf("translated packet does not decode: %v", r)
	}
	if q != *p {
		t.Fatalf("Parsed %+v does not match the bytes %+v", *p, q)
	}
	if right && !checksumsRight(b) {
		t.Fatal("translation broke a checksum")
	}
}
