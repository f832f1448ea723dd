package natengine

import (
	"bytes"
	"math/rand/v2"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/snorkel-net/snorkel/packet"
)

// The clusterset fixtures: VIP 243.0.0.10 serves TCP 80 and UDP 53 from a
// local backend and two remotes (peers 0 and 1); VIP 243.0.0.20 serves
// TCP 80 from the remotes only.
const (
	csVIP     = "243.0.0.10"
	csVIP2    = "243.0.0.20"
	csSNAT    = "243.1.255.254"
	csLocal   = "10.96.0.10"
	csRemote0 = "10.97.0.10"
	csRemote1 = "10.98.0.10"
	csClient  = "10.0.0.7"
)

func csTestRules(local bool) ClustersetRules {
	backends := []VIPBackend{{Peer: 0, Addr: ip(csRemote0)}, {Peer: 1, Addr: ip(csRemote1)}}
	b1 := backends
	if local {
		b1 = append([]VIPBackend{{Peer: LocalPeer, Addr: ip(csLocal)}}, backends...)
	}
	return ClustersetRules{
		SNAT: ip(csSNAT),
		Services: []VIPService{
			{VIP: ip(csVIP), Ports: []VIPPort{{tcp, 80}, {udp, 53}}, Backends: b1},
			{VIP: ip(csVIP2), Ports: []VIPPort{{tcp, 80}}, Backends: backends},
		},
	}
}

type testClusterset struct {
	*Clusterset
	clock *fakeClock
	mu    sync.Mutex
	down  map[int]bool
}

func newTestClusterset(t testing.TB, r ClustersetRules) *testClusterset {
	t.Helper()
	tc := &testClusterset{clock: &fakeClock{}, down: map[int]bool{}}
	c, err := NewClusterset(ClustersetConfig{Now: tc.clock.Now, Rand: seqRand(), Up: tc.up})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.SetRules(r); err != nil {
		t.Fatal(err)
	}
	tc.Clusterset = c
	return tc
}

func (tc *testClusterset) up(peer int) bool {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	return !tc.down[peer]
}

func (tc *testClusterset) setDown(peer int, down bool) {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	tc.down[peer] = down
}

// egress runs a copy of packet k through Egress and checks that the result
// decodes, matches its Parsed and has correct checksums.
func (tc *testClusterset) egress(t testing.TB, k pkt) ([]byte, VIPVerdict) {
	t.Helper()
	b := k.build()
	var p packet.Parsed
	if r := p.Decode(b); r != packet.DropNone {
		t.Fatalf("test packet does not decode: %v", r)
	}
	v := tc.Egress(b, &p)
	if v != VIPDrop {
		checkParsed(t, b, &p)
	}
	return b, v
}

func (tc *testClusterset) ingress(t testing.TB, k pkt) []byte {
	t.Helper()
	b := k.build()
	var p packet.Parsed
	if r := p.Decode(b); r != packet.DropNone {
		t.Fatalf("test packet does not decode: %v", r)
	}
	tc.Ingress(b, &p)
	checkParsed(t, b, &p)
	return b
}

func checkParsed(t testing.TB, b []byte, p *packet.Parsed) {
	t.Helper()
	var q packet.Parsed
	if r := q.Decode(b); r != packet.DropNone {
		t.Fatalf("translated packet does not decode: %v", r)
	}
	if q != *p {
		t.Fatalf("Parsed not updated to match the bytes:\n got %+v\nwant %+v", *p, q)
	}
	checkChecksums(t, b)
}

func wantTuple(t testing.TB, b []byte, src, dst string) {
	t.Helper()
	s, d := tuple(t, b)
	if s.String() != src || d.String() != dst {
		t.Fatalf("packet is %s → %s, want %s → %s", s, d, src, dst)
	}
}

func TestClustersetLocalBackendIsPreferredAndRepliesReturnFromTheVIP(t *testing.T) {
	tc := newTestClusterset(t, csTestRules(true))
	for _, tt := range []struct {
		name string
		out  pkt
	}{
		{"TCP", pkt{src: csClient, dst: csVIP, proto: tcp, sport: 40000, dport: 80, flags: syn}},
		{"UDP", pkt{src: csClient, dst: csVIP, proto: udp, sport: 40001, dport: 53}},
		{"ICMP echo", pkt{src: csClient, dst: csVIP, proto: icmp, sport: 77, dport: 77, icmpType: packet.ICMPv4EchoRequest}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b, v := tc.egress(t, tt.out)
			if v != VIPLocal {
				t.Fatalf("verdict %v, want VIPLocal", v)
			}
			s, d := tuple(t, b)
			if s.Addr() != ip(csSNAT) || d.Addr() != ip(csLocal) || (tt.out.proto != icmp && d.Port() != tt.out.dport) {
				t.Fatalf("packet is %s → %s, want %s:* → %s:%d", s, d, csSNAT, csLocal, tt.out.dport)
			}
			back, v := tc.egress(t, tt.out.reply(s, d))
			if v != VIPLocal {
				t.Fatalf("reply verdict %v, want VIPLocal", v)
			}
			wantTuple(t, back, netip.AddrPortFrom(ip(csVIP), tt.out.dport).String(), netip.AddrPortFrom(ip(csClient), tt.out.sport).String())
		})
	}
	if st := tc.Stats(); st.LocalFlows != 3 || st.RemoteFlows != 0 || st.Flows != 3 || st.Translated != 6 {
		t.Errorf("stats %+v, want 3 local flows and 6 translations", st)
	}
}

func TestClustersetRemoteBackendsTakeTurnsAmongThoseUp(t *testing.T) {
	tc := newTestClusterset(t, csTestRules(false))
	got := map[string]int{}
	for i := range 4 {
		b, v := tc.egress(t, pkt{src: csClient, dst: csVIP, proto: tcp, sport: uint16(40000 + i), dport: 80, flags: syn})
		if v != VIPRoute {
			t.Fatalf("verdict %v, want VIPRoute", v)
		}
		s, d := tuple(t, b)
		if s != netip.AddrPortFrom(ip(csClient), uint16(40000+i)) {
			t.Fatalf("source changed to %s; a remote backend sees the client", s)
		}
		got[d.Addr().String()]++
	}
	if got[csRemote0] != 2 || got[csRemote1] != 2 {
		t.Fatalf("backends chosen %v, want each remote twice", got)
	}

	tc.setDown(0, true)
	for i := range 3 {
		b, _ := tc.egress(t, pkt{src: csClient, dst: csVIP, proto: tcp, sport: uint16(41000 + i), dport: 80, flags: syn})
		if _, d := tuple(t, b); d.Addr() != ip(csRemote1) {
			t.Fatalf("with peer 0 down, a new connection went to %s", d)
		}
	}
	tc.setDown(1, true)
	if _, v := tc.egress(t, pkt{src: csClient, dst: csVIP, proto: tcp, sport: 42000, dport: 80, flags: syn}); v != VIPDrop {
		t.Fatalf("with every remote down, verdict %v, want VIPDrop", v)
	}
	if d := tc.Stats().Drops[VIPDropNoBackend]; d != 1 {
		t.Errorf("no_backend drops = %d, want 1", d)
	}
}

func TestClustersetRemoteReplyIsRewrittenToTheVIP(t *testing.T) {
	tc := newTestClusterset(t, csTestRules(false))
	out := pkt{src: csClient, dst: csVIP2, proto: tcp, sport: 40000, dport: 80, flags: syn}
	b, _ := tc.egress(t, out)
	s, d := tuple(t, b)
	back := tc.ingress(t, out.reply(s, d))
	wantTuple(t, back, csVIP2+":80", csClient+":40000")

	// A packet from the backend that is no reply (another port) passes.
	other := pkt{src: d.Addr().String(), dst: csClient, proto: tcp, sport: 81, dport: 40000, flags: ack}
	wantTuple(t, tc.ingress(t, other), d.Addr().String()+":81", csClient+":40000")
}

func TestClustersetSNATPortsNeverCollide(t *testing.T) {
	tc := newTestClusterset(t, csTestRules(true))
	clients := []string{"10.0.0.7", "10.0.0.8", "10.0.1.9"}
	seen := map[netip.AddrPort]string{}
	var outs [][]byte
	for _, c := range clients {
		b, v := tc.egress(t, pkt{src: c, dst: csVIP, proto: tcp, sport: 40000, dport: 80, flags: syn})
		if v != VIPLocal {
			t.Fatalf("verdict %v", v)
		}
		s, _ := tuple(t, b)
		if prev, dup := seen[s]; dup {
			t.Fatalf("clients %s and %s share SNAT endpoint %s", prev, c, s)
		}
		seen[s] = c
		outs = append(outs, b)
	}
	for i, b := range outs {
		s, d := tuple(t, b)
		back, _ := tc.egress(t, pkt{src: d.Addr().String(), dst: s.Addr().String(), proto: tcp, sport: d.Port(), dport: s.Port(), flags: syn | ack})
		wantTuple(t, back, csVIP+":80", clients[i]+":40000")
	}
}

func TestClustersetRefusesWhatItCannotServe(t *testing.T) {
	tc := newTestClusterset(t, csTestRules(true))
	for _, tt := range []struct {
		name string
		k    pkt
		want VIPDropReason
	}{
		{"port not served", pkt{src: csClient, dst: csVIP, proto: tcp, sport: 1, dport: 443, flags: syn}, VIPDropPortNotServed},
		{"protocol not served on port", pkt{src: csClient, dst: csVIP, proto: udp, sport: 1, dport: 80}, VIPDropPortNotServed},
		{"RST starts nothing", pkt{src: csClient, dst: csVIP, proto: tcp, sport: 1, dport: 80, flags: rst}, VIPDropNoFlow},
		{"echo reply starts nothing", pkt{src: csClient, dst: csVIP, proto: icmp, sport: 1, dport: 1, icmpType: packet.ICMPv4EchoReply}, VIPDropNoFlow},
		{"unknown VIP", pkt{src: csClient, dst: "243.0.0.99", proto: tcp, sport: 1, dport: 80, flags: syn}, VIPDropUnknownVIP},
		{"stray packet to the SNAT address", pkt{src: csLocal, dst: csSNAT, proto: tcp, sport: 80, dport: 5555, flags: ack}, VIPDropNoFlow},
		{"non-first fragment", pkt{src: csClient, dst: csVIP, proto: udp, sport: 1, dport: 53, fragOff: 4}, VIPDropFragment},
		{"SCTP", pkt{src: csClient, dst: csVIP, proto: 132}, VIPDropUnsupported},
	} {
		t.Run(tt.name, func(t *testing.T) {
			before := tc.Stats().Drops[tt.want]
			if _, v := tc.egress(t, tt.k); v != VIPDrop {
				t.Fatalf("verdict %v, want VIPDrop", v)
			}
			if after := tc.Stats().Drops[tt.want]; after != before+1 {
				t.Errorf("%s drops went %d → %d, want +1", tt.want, before, after)
			}
		})
	}
}

func TestClustersetConnectionKeepsItsBackendAcrossRuleChanges(t *testing.T) {
	tc := newTestClusterset(t, csTestRules(false))
	out := pkt{src: csClient, dst: csVIP, proto: tcp, sport: 40000, dport: 80, flags: syn}
	b, _ := tc.egress(t, out)
	_, first := tuple(t, b)

	// A local backend appears: the connection stays; a new one goes local.
	if err := tc.SetRules(csTestRules(true)); err != nil {
		t.Fatal(err)
	}
	out.flags = ack
	b, v := tc.egress(t, out)
	if _, d := tuple(t, b); v != VIPRoute || d != first {
		t.Fatalf("after adding a local backend the connection went to %s (%v), want %s", d, v, first)
	}
	if _, v := tc.egress(t, pkt{src: csClient, dst: csVIP, proto: tcp, sport: 40001, dport: 80, flags: syn}); v != VIPLocal {
		t.Fatalf("a new connection went %v, want VIPLocal", v)
	}

	// Its backend leaves: the connection ends, and its next packet starts
	// a new one on a backend still listed (which resets it).
	r := csTestRules(true)
	r.Services[0].Backends = slicesWithout(r.Services[0].Backends, first.Addr())
	if err := tc.SetRules(r); err != nil {
		t.Fatal(err)
	}
	if st := tc.Stats(); st.Retired != 1 || st.Flows != 1 {
		t.Fatalf("stats %+v, want 1 retired, 1 live", st)
	}
	if _, v := tc.egress(t, out); v != VIPLocal {
		t.Fatalf("after its backend left, the connection's packet went %v, want VIPLocal", v)
	}

	// The VIP leaves: every connection to it ends.
	r.Services = r.Services[1:]
	if err := tc.SetRules(r); err != nil {
		t.Fatal(err)
	}
	if st := tc.Stats(); st.Flows != 0 {
		t.Fatalf("%d connections live after their VIP left", st.Flows)
	}
	if _, v := tc.egress(t, out); v != VIPDrop {
		t.Fatalf("a packet to a removed VIP went %v", v)
	}
}

func slicesWithout(bs []VIPBackend, a netip.Addr) []VIPBackend {
	var out []VIPBackend
	for _, b := range bs {
		if b.Addr != a {
			out = append(out, b)
		}
	}
	return out
}

func TestClustersetFallsBackWhenTheLocalBackendGoes(t *testing.T) {
	tc := newTestClusterset(t, csTestRules(true))
	out := pkt{src: csClient, dst: csVIP, proto: udp, sport: 40000, dport: 53}
	if _, v := tc.egress(t, out); v != VIPLocal {
		t.Fatalf("verdict %v, want VIPLocal", v)
	}
	if err := tc.SetRules(csTestRules(false)); err != nil {
		t.Fatal(err)
	}
	b, v := tc.egress(t, out)
	if _, d := tuple(t, b); v != VIPRoute || (d.Addr() != ip(csRemote0) && d.Addr() != ip(csRemote1)) {
		t.Fatalf("with the local backend gone the flow went to %s (%v), want a remote", d, v)
	}
}

func TestClustersetConnectionsExpire(t *testing.T) {
	tc := newTestClusterset(t, csTestRules(false))
	out := pkt{src: csClient, dst: csVIP, proto: udp, sport: 40000, dport: 53}
	b, _ := tc.egress(t, out)
	_, first := tuple(t, b)
	tc.clock.Advance(60 * time.Second)
	b, _ = tc.egress(t, out)
	if _, d := tuple(t, b); d != first {
		t.Fatalf("within its timeout the flow moved from %s to %s", first, d)
	}
	tc.clock.Advance(time.Duration(udpUnrepliedMax+1) * time.Second)
	if st := tc.Stats(); st.Flows != 0 || st.Expired != 1 {
		t.Fatalf("stats %+v after the unreplied timeout, want 0 live, 1 expired", st)
	}
	b, _ = tc.egress(t, out)
	if _, d := tuple(t, b); d == first {
		t.Fatalf("an expired flow kept its backend %s; a new one should take the next", d)
	}
}

func TestClustersetEstablishedPathAllocatesNothing(t *testing.T) {
	tc := newTestClusterset(t, csTestRules(true))
	local := pkt{src: csClient, dst: csVIP, proto: tcp, sport: 40000, dport: 80, flags: ack}
	b, _ := tc.egress(t, local)
	s, d := tuple(t, b)
	localReply := local.reply(s, d).build()
	remote := pkt{src: csClient, dst: csVIP2, proto: tcp, sport: 40000, dport: 80, flags: ack}
	b, _ = tc.egress(t, remote)
	s, d = tuple(t, b)
	remoteReply := remote.reply(s, d).build()

	buf := make([]byte, 1500)
	var p packet.Parsed
	for _, tt := range []struct {
		name string
		b    []byte
		fn   func([]byte, *packet.Parsed) bool
	}{
		{"to a local backend", local.build(), func(b []byte, p *packet.Parsed) bool { return tc.Egress(b, p) == VIPLocal }},
		{"reply from a local backend", localReply, func(b []byte, p *packet.Parsed) bool { return tc.Egress(b, p) == VIPLocal }},
		{"to a remote backend", remote.build(), func(b []byte, p *packet.Parsed) bool { return tc.Egress(b, p) == VIPRoute }},
		{"reply from a remote backend", remoteReply, func(b []byte, p *packet.Parsed) bool { tc.Ingress(b, p); return p.Src == a16(csVIP2) }},
	} {
		allocs := testing.AllocsPerRun(1000, func() {
			n := copy(buf, tt.b)
			p.Decode(buf[:n])
			if !tt.fn(buf[:n], &p) {
				t.Fatal("not translated")
			}
		})
		if allocs != 0 {
			t.Errorf("%s: %v allocations per packet, want 0", tt.name, allocs)
		}
	}
}

// refConn is the slow reference's connection: the tuples before and after
// translation, in a list searched from the start.
type refConn struct {
	client, vip, backend, snat netip.AddrPort
}

// TestClustersetMatchesSlowReference drives random connections and replies
// through the engine and checks each packet against one built from scratch
// (full checksums) with the translation a linear list of connections gives.
func TestClustersetMatchesSlowReference(t *testing.T) {
	tc := newTestClusterset(t, csTestRules(true))
	rng := rand.New(rand.NewPCG(1, 2))
	var conns []refConn
	find := func(client, vip netip.AddrPort) *refConn {
		for i := range conns {
			if conns[i].client == client && conns[i].vip == vip {
				return &conns[i]
			}
		}
		return nil
	}
	vips := []string{csVIP, csVIP2}
	for range 3000 {
		client := netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 0, byte(rng.IntN(3)), byte(1 + rng.IntN(5))}), uint16(40000+rng.IntN(8)))
		vip := netip.AddrPortFrom(ip(vips[rng.IntN(2)]), 80)
		out := pkt{src: client.Addr().String(), dst: vip.Addr().String(), proto: tcp, sport: client.Port(), dport: 80, flags: ack, payload: []byte{byte(rng.IntN(256)), 1, 2}}
		b, v := tc.egress(t, out)
		s, d := tuple(t, b)
		c := find(client, vip)
		if c == nil {
			conns = append(conns, refConn{client, vip, d, s})
			c = &conns[len(conns)-1]
			if (vip.Addr() == ip(csVIP)) != (v == VIPLocal) {
				t.Fatalf("%s → %s went %v", client, vip, v)
			}
		}
		want := out
		want.src, want.sport, want.dst, want.dport = c.snat.Addr().String(), c.snat.Port(), c.backend.Addr().String(), c.backend.Port()
		if wb := want.build(); !bytes.Equal(b, wb) {
			t.Fatalf("%s → %s translated to\n %x\nwant\n %x", client, vip, b, wb)
		}
		if rng.IntN(2) == 0 {
			continue
		}
		reply := pkt{src: c.backend.Addr().String(), dst: c.snat.Addr().String(), proto: tcp, sport: c.backend.Port(), dport: c.snat.Port(), flags: ack, payload: []byte{9}}
		var back []byte
		if v == VIPLocal {
			back, _ = tc.egress(t, reply)
		} else {
			back = tc.ingress(t, reply)
		}
		wr := reply
		wr.src, wr.sport, wr.dst, wr.dport = vip.Addr().String(), vip.Port(), client.Addr().String(), client.Port()
		if wb := wr.build(); !bytes.Equal(back, wb) {
			t.Fatalf("reply to %s translated to\n %x\nwant\n %x", client, back, wb)
		}
	}
	if st := tc.Stats(); st.Flows != len(conns) {
		t.Fatalf("%d connections live, the reference has %d", st.Flows, len(conns))
	}
}

func TestClustersetRefusesBadRules(t *testing.T) {
	r := csTestRules(true)
	r.Services = append(r.Services, VIPService{VIP: ip(csVIP)})
	c, err := NewClusterset(ClustersetConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.SetRules(r); err == nil || !contains(err.Error(), "Services[2].VIP") {
		t.Fatalf("SetRules with a duplicate VIP = %v, want an error naming Services[2].VIP", err)
	}
	if _, err := NewClusterset(ClustersetConfig{MaxFlows: -1}); err == nil {
		t.Fatal("NewClusterset took MaxFlows -1")
	}
}

// BenchmarkClustersetIPEstablished measures the translation of a packet
// of an established connection to a VIP, per backend and direction. Each
// iteration restores the packet and its Parsed by copying.
func BenchmarkClustersetIPEstablished(b *testing.B) {
	c, err := NewClusterset(ClustersetConfig{})
	if err != nil {
		b.Fatal(err)
	}
	if err := c.SetRules(csTestRules(true)); err != nil {
		b.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		out  pkt
	}{
		{"local", pkt{src: csClient, dst: csVIP, proto: tcp, sport: 40000, dport: 80, flags: ack}},
		{"remote", pkt{src: csClient, dst: csVIP2, proto: tcp, sport: 40000, dport: 80, flags: ack}},
	} {
		out := tt.out.build()
		var p packet.Parsed
		first := bytes.Clone(out)
		p.Decode(first)
		v := c.Egress(first, &p)
		src, dst := netip.AddrPortFrom(p.SrcAddr(), p.SrcPort), netip.AddrPortFrom(p.DstAddr(), p.DstPort)
		reply := tt.out.reply(src, dst)
		reply.flags = ack
		for _, d := range []struct {
			dir string
			pk  []byte
			fn  func([]byte, *packet.Parsed) bool
		}{
			{"client", out, func(b []byte, p *packet.Parsed) bool { return c.Egress(b, p) == v }},
			{"reply", reply.build(), func(b []byte, p *packet.Parsed) bool {
				if v == VIPLocal {
					return c.Egress(b, p) == VIPLocal
				}
				c.Ingress(b, p)
				return p.Src == a16(csVIP2)
			}},
		} {
			b.Run(tt.name+"/"+d.dir, func(b *testing.B) {
				var p0, p packet.Parsed
				p0.Decode(d.pk)
				buf := make([]byte, len(d.pk))
				b.ReportAllocs()
				b.SetBytes(int64(len(d.pk)))
				for b.Loop() {
					copy(buf, d.pk)
					p = p0
					if !d.fn(buf, &p) {
						b.Fatal("not translated")
					}
				}
			})
		}
	}
}

// quoteOf returns the packet ICMP error b quotes.
func quoteOf(t testing.TB, b []byte) []byte {
	t.Helper()
	var p packet.Parsed
	if r := p.Decode(b); r != packet.DropNone {
		t.Fatalf("Decode = %v", r)
	}
	return b[p.IPHeaderLen+8 : p.Length]
}

func TestClustersetICMPErrorsFollowTheirConnection(t *testing.T) {
	tc := newTestClusterset(t, csTestRules(true))
	unreach := func(src, dst string, about []byte) pkt {
		l4 := icmpError(src, dst, packet.ICMPv4Unreachable, 3, 0, about, 0)
		var p packet.Parsed
		p.Decode(l4)
		return pkt{src: src, dst: dst, proto: icmp, l4: l4[p.IPHeaderLen:]}
	}
	for _, tt := range []struct {
		name  string
		vip   string
		local bool
	}{
		{"local backend", csVIP, true},
		{"remote backend", csVIP2, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			out := pkt{src: csClient, dst: tt.vip, proto: udp, sport: 40000, dport: 53}
			if tt.vip == csVIP2 {
				out.proto, out.dport, out.flags = tcp, 80, syn
			}
			sent := out.build()
			b, _ := tc.egress(t, out)
			s, d := tuple(t, b)

			// The backend says its port is unreachable: the client hears
			// it from the VIP, about the packet it sent.
			e := unreach(d.Addr().String(), s.Addr().String(), b)
			var back []byte
			if tt.local {
				var v VIPVerdict
				if back, v = tc.egress(t, e); v != VIPLocal {
					t.Fatalf("error to the SNAT address went %v", v)
				}
			} else {
				back = tc.ingress(t, e)
			}
			if src, dst := tuple(t, back); src.Addr() != ip(tt.vip) || dst.Addr() != ip(csClient) {
				t.Fatalf("error went %s → %s, want from the VIP to the client", src, dst)
			}
			if q := quoteOf(t, back); !bytes.Equal(q, sent) {
				t.Fatalf("error quotes\n %x\nwant what the client sent\n %x", q, sent)
			}

			// The client's side complains about a reply: the backend
			// hears it about the reply it sent.
			reply := out.reply(s, d)
			reply.flags = ack
			rb := reply.build()
			seen := rb
			if tt.local {
				seen, _ = tc.egress(t, reply)
			} else {
				seen = tc.ingress(t, reply)
			}
			fwd, v := tc.egress(t, unreach(csClient, tt.vip, seen))
			if want := map[bool]VIPVerdict{true: VIPLocal, false: VIPRoute}[tt.local]; v != want {
				t.Fatalf("error about a reply went %v, want %v", v, want)
			}
			if _, dst := tuple(t, fwd); dst.Addr() != d.Addr() {
				t.Fatalf("error about a reply went to %s, want the backend %s", dst, d)
			}
			if q := quoteOf(t, fwd); !bytes.Equal(q, rb) {
				t.Fatalf("error quotes\n %x\nwant the reply as the backend sent it\n %x", q, rb)
			}
		})
	}

	// An error about no connection, or sent to another client, is refused.
	stray := pkt{src: csLocal, dst: csSNAT, proto: udp, sport: 53, dport: 1}
	if _, v := tc.egress(t, unreach(csLocal, csSNAT, stray.build())); v != VIPDrop {
		t.Fatalf("an error about no connection went %v", v)
	}
}

// FuzzClusterset feeds any bytes to both directions of a Clusterset that
// already holds connections. Invariants: no panic; a translated packet
// still decodes, its Parsed matches its bytes, and checksums that were
// right stay right.
func FuzzClusterset(f *testing.F) {
	seeds := []pkt{
		{src: csClient, dst: csVIP, proto: tcp, sport: 40000, dport: 80, flags: syn},
		{src: csClient, dst: csVIP2, proto: tcp, sport: 40000, dport: 80, flags: syn},
		{src: csLocal, dst: csSNAT, proto: tcp, sport: 80, dport: 40000, flags: syn | ack},
		{src: csRemote0, dst: csClient, proto: tcp, sport: 80, dport: 40000, flags: syn | ack},
		{src: csClient, dst: csVIP, proto: icmp, icmpType: packet.ICMPv4EchoRequest, sport: 3, dport: 3},
		{src: csClient, dst: csVIP, proto: udp, sport: 5000, dport: 53, id: 4, more: true, payload: bigPayload},
	}
	for _, s := range seeds {
		f.Add(s.build(), false)
		f.Add(s.build(), true)
	}
	tc := newTestClusterset(f, csTestRules(true))
	tc.egress(f, seeds[0])
	tc.egress(f, seeds[1])
	f.Add(icmpError(csLocal, csSNAT, packet.ICMPv4Unreachable, 3, 0, seeds[2].reply(ap(csSNAT+":40000"), ap(csLocal+":80")).build(), 28), false)
	f.Fuzz(func(t *testing.T, b []byte, ingress bool) {
		var p packet.Parsed
		if p.Decode(b) != packet.DropNone {
			return
		}
		b = b[:p.Length]
		right := checksumsRight(b)
		if ingress {
			tc.Ingress(b, &p)
		} else if tc.Egress(b, &p) == VIPDrop {
			return
		}
		checkTranslated(t, b, &p, right)
	})
}

func TestClustersetIPv6(t *testing.T) {
	tc := newTestClusterset(t, ClustersetRules{
		SNAT: ip("fd43:1::ffff"),
		Services: []VIPService{
			{VIP: ip("fd43::10"), Ports: []VIPPort{{tcp, 80}}, Backends: []VIPBackend{{Peer: LocalPeer, Addr: ip("fd00:96::10")}}},
			{VIP: ip("fd43::20"), Ports: []VIPPort{{tcp, 80}}, Backends: []VIPBackend{{Peer: 0, Addr: ip("fd00:97::10")}}},
		},
	})
	for _, tt := range []struct {
		vip, backend string
		want         VIPVerdict
	}{
		{"fd43::10", "fd00:96::10", VIPLocal},
		{"fd43::20", "fd00:97::10", VIPRoute},
	} {
		out := pkt{src: "fd00::7", dst: tt.vip, proto: tcp, sport: 40000, dport: 80, flags: syn}
		b, v := tc.egress(t, out)
		s, d := tuple(t, b)
		if v != tt.want || d != netip.AddrPortFrom(ip(tt.backend), 80) {
			t.Fatalf("to %s: %v to %s, want %v to %s", tt.vip, v, d, tt.want, tt.backend)
		}
		var back []byte
		if v == VIPLocal {
			back, _ = tc.egress(t, out.reply(s, d))
		} else {
			back = tc.ingress(t, out.reply(s, d))
		}
		wantTuple(t, back, "["+tt.vip+"]:80", "[fd00::7]:40000")
	}
}
