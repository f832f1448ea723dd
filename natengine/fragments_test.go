package natengine

import (
	"net/netip"
	"testing"

	"github.com/snorkel-net/snorkel/packet"
)

var bigPayload = make([]byte, 100)

func frags(k pkt) (first, second, last []byte) {
	k.payload = bigPayload
	f, s, l := k, k, k
	f.more = true
	s.fragOff, s.more = 4, true
	l.fragOff = 8
	return f.build(), s.build(), l.build()
}

func srcOf(t *testing.T, b []byte) netip.Addr {
	var p packet.Parsed
	if p.Decode(b) != packet.DropNone {
		t.Fatal("does not decode")
	}
	return p.SrcAddr()
}

func dstOf(t *testing.T, b []byte) netip.Addr {
	var p packet.Parsed
	if p.Decode(b) != packet.DropNone {
		t.Fatal("does not decode")
	}
	return p.DstAddr()
}

func TestFragmentsFollowTheFirstFragment(t *testing.T) {
	for _, tt := range []struct {
		name  string
		rules Rules
		out   pkt
		want  string
	}{
		{"IPv4 UDP", testRules(), pkt{src: "10.0.0.7", dst: "242.2.0.9", proto: udp, sport: 5000, dport: 53, id: 77}, "242.1.0.3"},
		{"IPv6 UDP", testRules6(), pkt{src: "fd00::7", dst: "fd42:2::9", proto: udp, sport: 5000, dport: 53, id: 77}, "fd42:1::1"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := newTestEngine(t, Config{}, tt.rules)
			f, s, l := frags(tt.out)
			for i, b := range [][]byte{f, s, l} {
				out, ok := e.egress(t, b)
				if !ok || srcOf(t, out) != ip(tt.want) {
					t.Fatalf("egress fragment %d: ok=%v", i, ok)
				}
			}
			// The reply comes back in fragments too.
			r := tt.out
			r.src, r.dst, r.sport, r.dport, r.id = tt.out.dst, tt.want, tt.out.dport, tt.out.sport, 99
			f, s, l = frags(r)
			for i, b := range [][]byte{f, s, l} {
				in, ok := e.ingress(t, b)
				if !ok || dstOf(t, in) != ip(tt.out.src) {
					t.Fatalf("ingress fragment %d: ok=%v drops %v", i, ok, e.Stats().Drops)
				}
			}
			if e.Stats().Fragments != 2 {
				t.Errorf("pending fragment mappings %d, want 2", e.Stats().Fragments)
			}
			e.clock.Advance(fragTimeout * 1e9)
			e.egress(t, pkt{src: tt.out.src, dst: tt.out.dst, proto: udp, sport: 1, dport: 2, id: 1, more: true, payload: bigPayload}.build())
			if n := e.Stats().Fragments; n != 1 {
				t.Errorf("after the reassembly timeout %d mappings, want only the new one", n)
			}
		})
	}
}

func TestFragmentsOutOfOrder(t *testing.T) {
	e := newTestEngine(t, Config{}, testRules())
	// Egress: a pod's source address does not depend on ports.
	f, s, l := frags(pkt{src: "10.0.0.7", dst: "242.2.0.9", proto: udp, sport: 5000, dport: 53, id: 5})
	for i, b := range [][]byte{l, s, f} {
		out, ok := e.egress(t, b)
		if !ok || srcOf(t, out) != ip("242.1.0.3") {
			t.Fatalf("egress fragment %d out of order: ok=%v", i, ok)
		}
	}
	// Ingress to a service's global IP: one local address.
	f, s, l = frags(pkt{src: "242.2.0.9", dst: "242.1.0.200", proto: udp, sport: 5000, dport: 53, id: 6})
	for i, b := range [][]byte{s, l, f} {
		in, ok := e.ingress(t, b)
		if !ok || dstOf(t, in) != ip("10.96.0.10") {
			t.Fatalf("ingress fragment %d out of order: ok=%v", i, ok)
		}
	}
	// The ClusterIP's reply fragments, last first, leave from the service's global IP.
	f, s, l = frags(pkt{src: "10.96.0.10", dst: "242.2.0.9", proto: udp, sport: 53, dport: 5000, id: 8})
	for i, b := range [][]byte{l, f, s} {
		out, ok := e.egress(t, b)
		if !ok || srcOf(t, out) != ip("242.1.0.200") {
			t.Fatalf("reply fragment %d out of order: ok=%v", i, ok)
		}
	}
	// Ingress to an egress IP: many pods share it; without the first
	// fragment there is no telling which.
	_, s, _ = frags(pkt{src: "242.2.0.9", dst: "242.1.0.3", proto: udp, sport: 53, dport: 5000, id: 7})
	if _, ok := e.ingress(t, s); ok {
		t.Fatal("an unattributable fragment passed")
	}
	if n := e.Stats().Drops[DropFragmentUnknown]; n != 1 {
		t.Errorf("fragment_unknown = %d, want 1", n)
	}
}

func TestFragmentTableIsBoundedAndCounted(t *testing.T) {
	e := newTestEngine(t, Config{MaxFragments: 2}, testRules())
	for i, want := range []bool{true, true, false} {
		f, _, _ := frags(pkt{src: "10.0.0.7", dst: "242.2.0.9", proto: udp, sport: 5000, dport: 53, id: uint32(i)})
		if _, ok := e.egress(t, f); ok != want {
			t.Fatalf("first fragment %d passed=%v, want %v", i, ok, want)
		}
	}
	if n := e.Stats().Drops[DropFragmentsFull]; n != 1 {
		t.Errorf("fragments_full = %d, want 1", n)
	}
}
