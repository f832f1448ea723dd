package natengine

import (
	"testing"
	"time"

	"github.com/snorkel-net/snorkel/packet"
)

// step is one TCP segment of a connection: from the originator, or the reply.
type step struct {
	reply bool
	flags uint8
	want  FlowState
}

func TestTCPStateTransitionsAndTheirTimeouts(t *testing.T) {
	const est, trans = DefaultTCPEstablished, DefaultTCPTransitory
	tests := []struct {
		name    string
		steps   []step
		timeout time.Duration
	}{
		{"SYN opens in syn_sent", []step{{false, syn, StateSynSent}}, trans},
		{"SYN-ACK moves to syn_received", []step{{false, syn, StateSynSent}, {true, syn | ack, StateSynReceived}}, trans},
		{"the originator's ACK establishes", []step{{false, syn, StateSynSent}, {true, syn | ack, StateSynReceived}, {false, ack, StateEstablished}}, est},
		{"data in both directions stays established", []step{{false, syn, StateSynSent}, {true, syn | ack, StateSynReceived}, {false, ack, StateEstablished}, {true, ack, StateEstablished}, {false, ack | packet.TCPFlagPSH, StateEstablished}}, est},
		{"a FIN from the originator half-closes", []step{{false, syn, StateSynSent}, {true, syn | ack, StateSynReceived}, {false, ack, StateEstablished}, {false, fin | ack, StateFinWait}}, trans},
		{"a FIN from the responder half-closes", []step{{false, syn, StateSynSent}, {true, syn | ack, StateSynReceived}, {false, ack, StateEstablished}, {true, fin | ack, StateFinWait}}, trans},
		{"FINs both ways close", []step{{false, syn, StateSynSent}, {true, syn | ack, StateSynReceived}, {false, ack, StateEstablished}, {false, fin | ack, StateFinWait}, {true, fin | ack, StateClosing}, {false, ack, StateClosing}}, trans},
		{"a RST closes an established flow", []step{{false, syn, StateSynSent}, {true, syn | ack, StateSynReceived}, {false, ack, StateEstablished}, {true, rst, StateClosed}}, trans},
		{"a RST answering the SYN closes", []step{{false, syn, StateSynSent}, {true, rst | ack, StateClosed}}, trans},
		{"a new SYN reopens a closed tuple", []step{{false, syn, StateSynSent}, {true, rst | ack, StateClosed}, {false, syn, StateSynSent}}, trans},
		{"a flow picked up mid-stream establishes on the reply", []step{{false, ack, StateSynSent}, {true, ack, StateEstablished}}, est},
		{"simultaneous open goes through syn_received", []step{{false, syn, StateSynSent}, {true, syn, StateSynReceived}, {false, ack, StateEstablished}}, est},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newTestEngine(t, Config{}, testRules())
			out := pkt{src: "10.0.0.7", dst: "242.2.0.9", proto: tcp, sport: 40000, dport: 443}
			in := pkt{src: "242.2.0.9", dst: "242.1.0.3", proto: tcp, sport: 443, dport: 40000}
			for i, s := range tt.steps {
				var ok bool
				if s.reply {
					in.flags = s.flags
					_, ok = e.ingress(t, in.build())
				} else {
					out.flags = s.flags
					_, ok = e.egress(t, out.build())
				}
				if !ok {
					t.Fatalf("step %d dropped: %v", i, e.Stats().Drops)
				}
				if got := e.Flows()[0].State; got != s.want {
					t.Fatalf("after step %d state %v, want %v", i, got, s.want)
				}
			}
			e.clock.Advance(tt.timeout - time.Second)
			if n := e.Stats().Flows; n != 1 {
				t.Fatalf("flow gone after %v idle, before its timeout %v", tt.timeout-time.Second, tt.timeout)
			}
			e.clock.Advance(time.Second)
			s := e.Stats()
			if s.Flows != 0 || s.Expired != 1 {
				t.Fatalf("after %v idle: %d flows, %d expired; want it expired", tt.timeout, s.Flows, s.Expired)
			}
		})
	}
}

// An established flow that sees a FIN long after its last check must expire
// on the transitory timeout, not wait for the established one.
func TestFINShortensAnEstablishedFlowsTimeout(t *testing.T) {
	e := newTestEngine(t, Config{}, testRules())
	out := pkt{src: "10.0.0.7", dst: "242.2.0.9", proto: tcp, sport: 40000, dport: 443}
	in := pkt{src: "242.2.0.9", dst: "242.1.0.3", proto: tcp, sport: 443, dport: 40000}
	for _, s := range []step{{false, syn, 0}, {true, syn | ack, 0}, {false, ack, 0}} {
		k := out
		if s.reply {
			k = in
		}
		k.flags = s.flags
		run(t, map[bool]func(int, []byte, *packet.Parsed) bool{false: e.Egress, true: e.Ingress}[s.reply], k.build())
	}
	for range 10 { // an hour of keepalives
		e.clock.Advance(6 * time.Minute)
		out.flags = ack
		e.egress(t, out.build())
	}
	out.flags = fin | ack
	e.egress(t, out.build())
	e.clock.Advance(DefaultTCPTransitory)
	if n := e.Stats().Flows; n != 0 {
		t.Fatalf("%d flows %v after a FIN, want 0", n, DefaultTCPTransitory)
	}
}

func TestUDPTimeoutsRepliedAndUnreplied(t *testing.T) {
	for _, tt := range []struct {
		name    string
		replied bool
		timeout time.Duration
	}{
		{"an unreplied UDP flow lives 2 minutes (RFC 4787 REQ-5 floor)", false, 120 * time.Second},
		{"a replied UDP flow lives the UDP timeout", true, DefaultUDP},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := newTestEngine(t, Config{}, testRules())
			e.egress(t, pkt{src: "10.0.0.7", dst: "242.2.0.9", proto: udp, sport: 5000, dport: 53}.build())
			if tt.replied {
				if _, ok := e.ingress(t, pkt{src: "242.2.0.9", dst: "242.1.0.3", proto: udp, sport: 53, dport: 5000}.build()); !ok {
					t.Fatal("reply dropped")
				}
			}
			e.clock.Advance(tt.timeout - time.Second)
			if e.Stats().Flows != 1 {
				t.Fatal("expired early")
			}
			e.clock.Advance(time.Second)
			if e.Stats().Flows != 0 {
				t.Fatal("did not expire")
			}
		})
	}
}

func TestTrafficRefreshesAFlow(t *testing.T) {
	e := newTestEngine(t, Config{Timeouts: Timeouts{UDP: 30 * time.Second}}, testRules())
	k := pkt{src: "10.0.0.7", dst: "242.2.0.9", proto: udp, sport: 5000, dport: 53}
	for range 20 {
		e.egress(t, k.build())
		e.clock.Advance(29 * time.Second)
	}
	s := e.Stats()
	if s.Flows != 1 || s.NewFlows != 1 {
		t.Fatalf("flows %d, created %d: a flow seen every 29 s with a 30 s timeout must live on", s.Flows, s.NewFlows)
	}
	// The mapping is what it was.
	b, _ := e.egress(t, k.build())
	if src, _ := tuple(t, b); src != ap("242.1.0.3:5000") {
		t.Errorf("source %v", src)
	}
}

func TestICMPEchoTimeout(t *testing.T) {
	e := newTestEngine(t, Config{}, testRules())
	e.egress(t, pkt{src: "10.0.0.7", dst: "242.2.0.9", proto: icmp, icmpType: packet.ICMPv4EchoRequest, sport: 4, dport: 4}.build())
	e.clock.Advance(DefaultICMP - time.Second)
	if e.Stats().Flows != 1 {
		t.Fatal("expired early")
	}
	e.clock.Advance(time.Second)
	if e.Stats().Flows != 0 {
		t.Fatal("did not expire")
	}
}

// The wheel catches up after the clock jumps past a whole turn.
func TestClockJumpExpiresEverything(t *testing.T) {
	e := newTestEngine(t, Config{}, testRules())
	for i := range 100 {
		e.egress(t, pkt{src: "10.0.0.7", dst: "242.2.0.9", proto: tcp, sport: uint16(2000 + i), dport: 443, flags: syn}.build())
	}
	e.clock.Advance(30 * time.Hour)
	if n := e.Stats().Flows; n != 0 {
		t.Fatalf("%d flows after 30 h", n)
	}
}
