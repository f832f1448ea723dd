package natengine

import (
	"bytes"
	"testing"

	"github.com/snorkel-net/snorkel/packet"
)

// TestICMPErrorsAreTranslatedThroughTheirQuote: an error about a translated
// packet reaches the original sender with the quote as that sender wrote it,
// and every checksum as a full recompute gives.
func TestICMPErrorsAreTranslatedThroughTheirQuote(t *testing.T) {
	tests := []struct {
		name  string
		rules Rules
		out   pkt // the packet the local side sends first
		// errFor builds the error a remote router sends about the
		// translated packet.
		errFor func(translated []byte) []byte
		n      int // bytes of the translated packet quoted
	}{
		{"TTL exceeded from a remote router, quoting 8 bytes of TCP", testRules(),
			pkt{src: "10.0.0.7", dst: "242.2.0.9", proto: tcp, sport: 40000, dport: 443, flags: syn},
			func(b []byte) []byte {
				return icmpError("242.2.0.1", "242.1.0.1", packet.ICMPv4TimeExceeded, 0, 0, b, 28)
			}, 28},
		{"fragmentation needed quoting the whole UDP datagram", testRules(),
			pkt{src: "10.0.0.7", dst: "242.2.0.9", proto: udp, sport: 5000, dport: 53},
			func(b []byte) []byte {
				return icmpError("242.2.0.1", "242.1.0.1", packet.ICMPv4Unreachable, packet.ICMPv4FragNeededCode, 1400, b, 0)
			}, 0},
		{"TTL exceeded quoting an echo request", testRules(),
			pkt{src: "10.0.0.7", dst: "242.2.0.9", proto: icmp, icmpType: packet.ICMPv4EchoRequest, sport: 9, dport: 9},
			func(b []byte) []byte {
				return icmpError("242.2.0.1", "242.1.0.1", packet.ICMPv4TimeExceeded, 0, 0, b, 0)
			}, 0},
		{"ICMPv6 packet too big", testRules6(),
			pkt{src: "fd00::7", dst: "fd42:2::9", proto: tcp, sport: 40000, dport: 443, flags: ack},
			func(b []byte) []byte {
				return icmpError("fd42:2::1", "fd42:1::1", packet.ICMPv6PacketTooBig, 0, 1280, b, 0)
			}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := tt.rules
			e := newTestEngine(t, Config{}, r)
			orig := tt.out.build()
			// Force a port change so that the quote's port must be
			// translated too: another pod holds the port first.
			other := tt.out
			other.src = map[bool]string{true: "fd00::8", false: "10.0.0.8"}[orig[0]>>4 == 6]
			if r.ClusterEgress = r.ClusterEgress[:1]; e.SetRules(r) != nil {
				t.Fatal("SetRules")
			}
			if _, ok := e.egress(t, other.build()); !ok {
				t.Fatal("first flow dropped")
			}
			translated, ok := e.egress(t, orig)
			if !ok {
				t.Fatal("egress dropped")
			}
			if s, _ := tuple(t, translated); s.Port() == tt.out.sport && tt.out.proto != 132 {
				t.Fatal("test wants a changed port")
			}
			before := e.Flows()
			msg := tt.errFor(translated)
			got, ok := e.ingress(t, msg)
			if !ok {
				t.Fatalf("error dropped: %v", e.Stats().Drops)
			}
			checkChecksums(t, got)
			var p packet.Parsed
			p.Decode(got)
			if p.DstAddr().String() != tt.out.src {
				t.Errorf("error sent to %v, want the original sender %s", p.DstAddr(), tt.out.src)
			}
			inner, _ := packet.ICMPInner(got, &p)
			want := orig
			if tt.n > 0 {
				want = orig[:tt.n]
			}
			if !bytes.Equal(inner, want) {
				t.Errorf("quote\n%x\nwant the packet as sent\n%x", inner, want)
			}
			after := e.Flows()
			if len(after) != len(before) {
				t.Fatalf("flows %d → %d", len(before), len(after))
			}
			for i := range after {
				if after[i].State != before[i].State {
					t.Errorf("an error changed flow %d's state %v → %v", i, before[i].State, after[i].State)
				}
			}
		})
	}
}

// A local host answers an inbound flow with an error (port unreachable):
// the remote must see it from the global address, about the packet it sent.
func TestLocalICMPErrorAboutAnInboundFlowLeavesTranslated(t *testing.T) {
	e := newTestEngine(t, Config{}, testRules())
	sent := pkt{src: "242.2.0.9", dst: "242.1.0.201", proto: udp, sport: 6000, dport: 7000}.build()
	in, ok := e.ingress(t, sent)
	if !ok {
		t.Fatal("ingress dropped")
	}
	msg := icmpError("10.0.2.5", "242.2.0.9", packet.ICMPv4Unreachable, 3, 0, in, 0)
	out, ok := e.egress(t, msg)
	if !ok {
		t.Fatalf("error dropped: %v", e.Stats().Drops)
	}
	checkChecksums(t, out)
	var p packet.Parsed
	p.Decode(out)
	if p.SrcAddr() != ip("242.1.0.201") {
		t.Errorf("error from %v, want 242.1.0.201", p.SrcAddr())
	}
	inner, _ := packet.ICMPInner(out, &p)
	if !bytes.Equal(inner, sent) {
		t.Errorf("quote\n%x\nwant\n%x", inner, sent)
	}
}

func TestICMPErrorsNeverCreateOrRefreshState(t *testing.T) {
	e := newTestEngine(t, Config{}, testRules())
	// An error about a flow that does not exist.
	ghost := pkt{src: "242.1.0.3", dst: "242.2.0.9", proto: tcp, sport: 1111, dport: 443, flags: syn}.build()
	if _, ok := e.ingress(t, icmpError("242.2.0.1", "242.1.0.3", packet.ICMPv4TimeExceeded, 0, 0, ghost, 0)); ok {
		t.Error("an error about no flow passed")
	}
	if _, ok := e.egress(t, icmpError("10.0.0.7", "242.2.0.9", packet.ICMPv4Unreachable, 3, 0,
		pkt{src: "242.2.0.9", dst: "10.0.0.7", proto: udp, sport: 1, dport: 2}.build(), 0)); ok {
		t.Error("a local error about no flow passed")
	}
	if s := e.Stats(); s.Flows != 0 || s.Drops[DropNoFlow] != 2 {
		t.Fatalf("flows %d, no_flow %d; want 0 and 2", s.Flows, s.Drops[DropNoFlow])
	}
	// Errors about a live flow do not keep it alive.
	k := pkt{src: "10.0.0.7", dst: "242.2.0.9", proto: udp, sport: 5000, dport: 53}
	b, _ := e.egress(t, k.build())
	for range 10 {
		e.clock.Advance(20 * 1e9)
		if _, ok := e.ingress(t, icmpError("242.2.0.1", "242.1.0.3", packet.ICMPv4Unreachable, 3, 0, b, 0)); !ok && e.Stats().Flows == 1 {
			t.Fatal("error about a live flow dropped")
		}
	}
	if n := e.Stats().Flows; n != 0 {
		t.Errorf("%d flows: errors kept an unreplied flow alive past 2 minutes", n)
	}
}

func TestICMPErrorWithBadChecksumIsDropped(t *testing.T) {
	e := newTestEngine(t, Config{}, testRules())
	b, _ := e.egress(t, pkt{src: "10.0.0.7", dst: "242.2.0.9", proto: udp, sport: 5000, dport: 53}.build())
	msg := icmpError("242.2.0.1", "242.1.0.3", packet.ICMPv4Unreachable, 3, 0, b, 0)
	msg[len(msg)-1] ^= 0xff
	if _, ok := e.ingress(t, msg); ok {
		t.Error("a corrupt error passed")
	}
	if e.Stats().Drops[DropMalformed] != 1 {
		t.Error("not counted as malformed")
	}
}
