package natengine

import (
	"net/netip"
	"testing"
	"time"

	"github.com/snorkel-net/snorkel/packet"
)

const (
	tcp  = packet.ProtoTCP
	udp  = packet.ProtoUDP
	icmp = packet.ProtoICMPv4
	icm6 = packet.ProtoICMPv6
	syn  = packet.TCPFlagSYN
	ack  = packet.TCPFlagACK
	fin  = packet.TCPFlagFIN
	rst  = packet.TCPFlagRST
)

// reply returns the packet answering k: addresses and ports swapped.
func (k pkt) reply(src, dst netip.AddrPort) pkt {
	r := k
	r.src, r.dst = dst.Addr().String(), src.Addr().String()
	r.sport, r.dport = dst.Port(), src.Port()
	switch k.icmpType {
	case packet.ICMPv4EchoRequest:
		r.icmpType = packet.ICMPv4EchoReply
	case packet.ICMPv6EchoRequest:
		r.icmpType = packet.ICMPv6EchoReply
	}
	if k.proto == tcp {
		r.flags = syn | ack
	}
	return r
}

func TestEgressFlowIsTranslatedAndItsRepliesReturn(t *testing.T) {
	tests := []struct {
		name     string
		rules    Rules
		out      pkt
		wantFrom netip.AddrPort
	}{
		{"TCP SYN from a pod takes a cluster egress IP and keeps its port", testRules(),
			pkt{src: "10.0.0.7", dst: "242.2.0.9", proto: tcp, sport: 40000, dport: 443, flags: syn}, ap("242.1.0.3:40000")},
		{"UDP from a pod", testRules(),
			pkt{src: "10.0.0.7", dst: "242.2.0.9", proto: udp, sport: 5353, dport: 53}, ap("242.1.0.3:5353")},
		{"UDP without checksum keeps a zero checksum", testRules(),
			pkt{src: "10.0.0.7", dst: "242.2.0.9", proto: udp, sport: 5354, dport: 53, noCsum: true}, ap("242.1.0.3:5354")},
		{"ICMP echo request keeps its identifier", testRules(),
			pkt{src: "10.0.0.7", dst: "242.2.0.9", proto: icmp, icmpType: packet.ICMPv4EchoRequest, sport: 77, dport: 77}, ap("242.1.0.3:77")},
		{"a protocol without ports has its address translated", testRules(),
			pkt{src: "10.0.0.7", dst: "242.2.0.9", proto: 132}, ap("242.1.0.3:0")},
		{"IPv6 TCP", testRules6(),
			pkt{src: "fd00::7", dst: "fd42:2::9", proto: tcp, sport: 40000, dport: 443, flags: syn}, ap("[fd42:1::1]:40000")},
		{"IPv6 UDP", testRules6(),
			pkt{src: "fd00::7", dst: "fd42:2::9", proto: udp, sport: 5353, dport: 53}, ap("[fd42:1::1]:5353")},
		{"ICMPv6 echo request", testRules6(),
			pkt{src: "fd00::7", dst: "fd42:2::9", proto: icm6, icmpType: packet.ICMPv6EchoRequest, sport: 9, dport: 9}, ap("[fd42:1::1]:9")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newTestEngine(t, Config{}, tt.rules)
			orig := tt.out.build()
			b, ok := e.egress(t, orig)
			if !ok {
				t.Fatalf("Egress dropped: %+v", e.Stats().Drops)
			}
			checkChecksums(t, b)
			src, dst := tuple(t, b)
			if src != tt.wantFrom {
				t.Fatalf("egress source = %v, want %v", src, tt.wantFrom)
			}
			if tt.out.noCsum && packet.UDP(b[20:]).Checksum() != 0 {
				t.Fatal("UDP checksum 0 became non-zero")
			}
			r := tt.out.reply(src, dst).build()
			back, ok := e.ingress(t, r)
			if !ok {
				t.Fatalf("Ingress dropped the reply: %+v", e.Stats().Drops)
			}
			checkChecksums(t, back)
			osrc, odst := tuple(t, orig)
			rsrc, rdst := tuple(t, back)
			if rsrc != odst || rdst != osrc {
				t.Errorf("reply arrives as %v → %v, want %v → %v", rsrc, rdst, odst, osrc)
			}
			fl := e.Flows()
			if len(fl) != 1 || fl[0].Inbound || fl[0].State == StateUnreplied || fl[0].State == StateSynSent {
				t.Errorf("Flows = %+v, want one replied outbound flow", fl)
			}
		})
	}
}

func TestPoolPrecedence(t *testing.T) {
	tests := []struct {
		name, pod string
		want      []string // the global IPs that may be chosen
		rule      string
	}{
		{"a pod-selector pool wins over its namespace pool", "10.0.1.5", []string{"242.1.0.60", "242.1.0.61"}, "sel-red"},
		{"a namespace pool applies to the namespace's other pods", "10.0.1.6", []string{"242.1.0.50"}, "ns-blue"},
		{"a namespace pool wins over a headless pod's own IP", "10.0.1.7", []string{"242.1.0.50"}, "ns-blue"},
		{"a pod-selector pool wins over a headless pod's own IP", "10.0.3.9", []string{"242.1.0.60", "242.1.0.61"}, "sel-red"},
		{"a headless pod's own IP wins over the cluster pool", "10.0.2.5", []string{"242.1.0.201"}, "db-0"},
		{"any other pod takes the cluster pool", "10.0.9.9", []string{"242.1.0.1", "242.1.0.2", "242.1.0.3", "242.1.0.4"}, ClusterEgressRule},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newTestEngine(t, Config{}, testRules())
			var first netip.Addr
			for i := range 3 {
				b, ok := e.egress(t, pkt{src: tt.pod, dst: "242.2.0.9", proto: tcp, sport: uint16(1000 + i), dport: 443, flags: syn}.build())
				if !ok {
					t.Fatal("dropped")
				}
				src, _ := tuple(t, b)
				if i == 0 {
					first = src.Addr()
				} else if src.Addr() != first {
					t.Fatalf("flow %d left from %v, flow 0 from %v: a pod's egress IP must be stable", i, src.Addr(), first)
				}
			}
			found := false
			for _, w := range tt.want {
				found = found || first == ip(w)
			}
			if !found {
				t.Errorf("egress IP %v, want one of %v", first, tt.want)
			}
			if fl := e.Flows(); fl[0].Rule != tt.rule {
				t.Errorf("rule %q, want %q", fl[0].Rule, tt.rule)
			}
		})
	}
}

func TestHeadlessPodIsReachableAndLeavesFromItsOwnIP(t *testing.T) {
	e := newTestEngine(t, Config{}, testRules())
	// Inbound: remote → the pod's global IP, any port.
	in := pkt{src: "242.2.0.9", dst: "242.1.0.201", proto: tcp, sport: 50000, dport: 5432, flags: syn}
	b, ok := e.ingress(t, in.build())
	if !ok {
		t.Fatal("ingress dropped")
	}
	checkChecksums(t, b)
	if src, dst := tuple(t, b); src != ap("242.2.0.9:50000") || dst != ap("10.0.2.5:5432") {
		t.Fatalf("ingress = %v → %v, want 242.2.0.9:50000 → 10.0.2.5:5432", src, dst)
	}
	b, ok = e.egress(t, pkt{src: "10.0.2.5", dst: "242.2.0.9", proto: tcp, sport: 5432, dport: 50000, flags: syn | ack}.build())
	if !ok {
		t.Fatal("reply dropped")
	}
	if src, _ := tuple(t, b); src != ap("242.1.0.201:5432") {
		t.Fatalf("reply from %v, want 242.1.0.201:5432", src)
	}
	// Outbound: the pod's own connection leaves from its global IP.
	b, ok = e.egress(t, pkt{src: "10.0.2.5", dst: "242.2.0.7", proto: udp, sport: 9000, dport: 53}.build())
	if !ok {
		t.Fatal("egress dropped")
	}
	if src, _ := tuple(t, b); src != ap("242.1.0.201:9000") {
		t.Fatalf("egress from %v, want 242.1.0.201:9000", src)
	}
}

func TestIngressToServiceGlobalIPReachesClusterIP(t *testing.T) {
	for _, tt := range []struct {
		name        string
		rules       Rules
		in          pkt
		local       string
		global, rem string
	}{
		{"IPv4 TCP", testRules(), pkt{src: "242.2.0.9", dst: "242.1.0.200", proto: tcp, sport: 50001, dport: 8080, flags: syn}, "10.96.0.10", "242.1.0.200", "242.2.0.9"},
		{"IPv4 ICMP echo", testRules(), pkt{src: "242.2.0.9", dst: "242.1.0.200", proto: icmp, icmpType: packet.ICMPv4EchoRequest, sport: 3, dport: 3}, "10.96.0.10", "242.1.0.200", "242.2.0.9"},
		{"IPv6 UDP", testRules6(), pkt{src: "fd42:2::9", dst: "fd42:1::200", proto: udp, sport: 50001, dport: 53}, "fd00::10", "fd42:1::200", "fd42:2::9"},
		{"ICMPv6 echo", testRules6(), pkt{src: "fd42:2::9", dst: "fd42:1::200", proto: icm6, icmpType: packet.ICMPv6EchoRequest, sport: 3, dport: 3}, "fd00::10", "fd42:1::200", "fd42:2::9"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := newTestEngine(t, Config{}, tt.rules)
			b, ok := e.ingress(t, tt.in.build())
			if !ok {
				t.Fatalf("dropped: %v", e.Stats().Drops)
			}
			checkChecksums(t, b)
			src, dst := tuple(t, b)
			if dst.Addr() != ip(tt.local) || dst.Port() != tt.in.dport || src.Addr() != ip(tt.rem) {
				t.Fatalf("ingress = %v → %v, want → %s:%d", src, dst, tt.local, tt.in.dport)
			}
			// The reply, after kube-proxy un-DNAT, comes from the ClusterIP.
			r := tt.in.reply(src, dst).build()
			out, ok := e.egress(t, r)
			if !ok {
				t.Fatal("reply dropped")
			}
			checkChecksums(t, out)
			rs, rd := tuple(t, out)
			if rs != netip.AddrPortFrom(ip(tt.global), tt.in.dport) || rd != src {
				t.Errorf("reply = %v → %v, want %s:%d → %v", rs, rd, tt.global, tt.in.dport, src)
			}
			if fl := e.Flows(); len(fl) != 1 || !fl[0].Inbound || fl[0].Rule == "" {
				t.Errorf("Flows = %+v, want one inbound flow with its rule", fl)
			}
		})
	}
}

func TestIngressWithoutFlowOrRuleIsDroppedAndCounted(t *testing.T) {
	e := newTestEngine(t, Config{}, testRules())
	for _, dst := range []string{"242.1.0.99", "242.1.0.1"} {
		if _, ok := e.ingress(t, pkt{src: "242.2.0.9", dst: dst, proto: tcp, sport: 1, dport: 2, flags: syn}.build()); ok {
			t.Errorf("ingress to %s with no flow and no rule passed", dst)
		}
	}
	if got := e.Stats().Drops[DropNoRule]; got != 2 {
		t.Errorf("no_rule drops = %d, want 2", got)
	}
}

func TestTrafficOutsideGlobalnetPassesUntouched(t *testing.T) {
	e := newTestEngine(t, Config{}, testRules())
	for _, tt := range []struct {
		name   string
		b      []byte
		egress bool
	}{
		{"egress to a destination outside the remote's global CIDR", pkt{src: "10.0.0.7", dst: "10.200.0.1", proto: tcp, sport: 1, dport: 2, flags: syn}.build(), true},
		{"egress from a source outside Local", pkt{src: "192.168.0.1", dst: "242.2.0.9", proto: tcp, sport: 1, dport: 2, flags: syn}.build(), true},
		{"ingress to an address outside Global", pkt{src: "242.2.0.9", dst: "10.0.0.7", proto: tcp, sport: 1, dport: 2, flags: syn}.build(), false},
		{"egress of the other family", pkt{src: "fd00::7", dst: "fd42:2::9", proto: udp, sport: 1, dport: 2}.build(), true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var b []byte
			var ok bool
			if tt.egress {
				b, ok = e.egress(t, tt.b)
			} else {
				b, ok = e.ingress(t, tt.b)
			}
			if !ok || string(b) != string(tt.b) {
				t.Errorf("packet changed or dropped (ok=%v)", ok)
			}
		})
	}
	if n := e.Stats().Flows; n != 0 {
		t.Errorf("%d flows created, want 0", n)
	}
}

func TestPortPreservationAndCollision(t *testing.T) {
	r := testRules()
	r.ClusterEgress = r.ClusterEgress[:1] // every pod shares 242.1.0.1
	e := newTestEngine(t, Config{}, r)
	send := func(k pkt) netip.AddrPort {
		t.Helper()
		b, ok := e.egress(t, k.build())
		if !ok {
			t.Fatalf("dropped %+v: %v", k, e.Stats().Drops)
		}
		src, _ := tuple(t, b)
		return src
	}
	a := send(pkt{src: "10.0.0.1", dst: "242.2.0.9", proto: tcp, sport: 40000, dport: 443, flags: syn})
	if a != ap("242.1.0.1:40000") {
		t.Fatalf("first flow from %v, want the port kept", a)
	}
	b := send(pkt{src: "10.0.0.2", dst: "242.2.0.9", proto: tcp, sport: 40000, dport: 443, flags: syn})
	if b.Addr() != a.Addr() || b.Port() == 40000 || b.Port() < portFirst {
		t.Fatalf("colliding flow from %v, want another port ≥ %d on %v", b, portFirst, a.Addr())
	}
	c := send(pkt{src: "10.0.0.2", dst: "242.2.0.9", proto: tcp, sport: 40000, dport: 444, flags: syn})
	if c != ap("242.1.0.1:40000") {
		t.Fatalf("TCP to another destination port from %v, want 40000 kept: the mapping is unique on the reply tuple", c)
	}
	// UDP: one global endpoint per local endpoint, whatever the destination.
	u1 := send(pkt{src: "10.0.0.1", dst: "242.2.0.9", proto: udp, sport: 5000, dport: 53})
	u2 := send(pkt{src: "10.0.0.1", dst: "242.2.0.10", proto: udp, sport: 5000, dport: 123})
	if u1 != ap("242.1.0.1:5000") || u2 != u1 {
		t.Fatalf("UDP from one local endpoint left as %v and %v, want 242.1.0.1:5000 for both", u1, u2)
	}
	u3 := send(pkt{src: "10.0.0.2", dst: "242.2.0.11", proto: udp, sport: 5000, dport: 53})
	if u3 == u1 {
		t.Fatalf("a second local endpoint took the UDP mapping %v of the first", u3)
	}
}

func TestPoolExhaustionIsCounted(t *testing.T) {
	r := testRules()
	r.ClusterEgress = r.ClusterEgress[:1]
	// A random source stuck on one value leaves the search one candidate.
	e := newTestEngine(t, Config{Rand: func() uint32 { return 7 }}, r)
	for i, want := range []bool{true, true, false} {
		_, ok := e.egress(t, pkt{src: netip.AddrFrom4([4]byte{10, 0, 0, byte(i + 1)}).String(), dst: "242.2.0.9", proto: tcp, sport: 40000, dport: 443, flags: syn}.build())
		if ok != want {
			t.Fatalf("flow %d passed=%v, want %v", i, ok, want)
		}
	}
	// Without ports a global IP serves one local address per remote one.
	for i, want := range []bool{true, false} {
		_, ok := e.egress(t, pkt{src: netip.AddrFrom4([4]byte{10, 0, 0, byte(i + 1)}).String(), dst: "242.2.0.9", proto: 47}.build())
		if ok != want {
			t.Fatalf("GRE flow %d passed=%v, want %v", i, ok, want)
		}
	}
	if got := e.Stats().Drops[DropPoolExhausted]; got != 2 {
		t.Errorf("pool_exhausted = %d, want 2", got)
	}
}

func TestPacketsThatCannotStartAFlowAreDropped(t *testing.T) {
	e := newTestEngine(t, Config{}, testRules())
	for _, k := range []pkt{
		{src: "10.0.0.7", dst: "242.2.0.9", proto: tcp, sport: 1, dport: 2, flags: rst},
		{src: "10.0.0.7", dst: "242.2.0.9", proto: icmp, icmpType: packet.ICMPv4EchoReply, sport: 5, dport: 5},
	} {
		if _, ok := e.egress(t, k.build()); ok {
			t.Errorf("%+v passed", k)
		}
	}
	if _, ok := e.ingress(t, pkt{src: "242.2.0.9", dst: "242.1.0.200", proto: tcp, sport: 1, dport: 2, flags: rst}.build()); ok {
		t.Error("inbound RST passed")
	}
	s := e.Stats()
	if s.Flows != 0 || s.Drops[DropNoFlow] != 3 {
		t.Errorf("flows %d, no_flow %d; want 0 and 3", s.Flows, s.Drops[DropNoFlow])
	}
}

func TestRuleChangeKeepsMatchingFlowsAndRetiresOthers(t *testing.T) {
	e := newTestEngine(t, Config{}, testRules())
	open := func(k pkt, in bool) {
		t.Helper()
		var ok bool
		if in {
			_, ok = e.ingress(t, k.build())
		} else {
			_, ok = e.egress(t, k.build())
		}
		if !ok {
			t.Fatalf("dropped %+v", k)
		}
	}
	open(pkt{src: "10.0.0.7", dst: "242.2.0.9", proto: tcp, sport: 1000, dport: 443, flags: syn}, false)    // cluster pool: kept
	open(pkt{src: "10.0.1.6", dst: "242.2.0.9", proto: tcp, sport: 1000, dport: 443, flags: syn}, false)    // ns-blue: pool removed
	open(pkt{src: "242.2.0.9", dst: "242.1.0.200", proto: tcp, sport: 1000, dport: 80, flags: syn}, true)   // web: kept
	open(pkt{src: "242.2.0.9", dst: "242.1.0.201", proto: tcp, sport: 1000, dport: 5432, flags: syn}, true) // db-0: moved to another pod
	r := testRules()
	r.Pools = r.Pools[1:]
	r.ClusterEgress = append(r.ClusterEgress, ip("242.1.0.5")) // a grown pool keeps its flows
	r.Ingress[1].Local = ip("10.0.2.6")
	if err := e.SetRules(r); err != nil {
		t.Fatal(err)
	}
	s := e.Stats()
	if s.Flows != 2 || s.Retired != 2 {
		t.Fatalf("flows %d, retired %d; want 2 and 2", s.Flows, s.Retired)
	}
	rules := map[string]bool{}
	for _, f := range e.Flows() {
		rules[f.Rule] = true
	}
	if !rules[ClusterEgressRule] || !rules["web"] {
		t.Errorf("kept flows' rules %v, want cluster-egress and web", rules)
	}
	// The retired pod now leaves by the cluster pool.
	b, _ := e.egress(t, pkt{src: "10.0.1.6", dst: "242.2.0.9", proto: tcp, sport: 1000, dport: 443, flags: ack}.build())
	if src, _ := tuple(t, b); src.Addr() == ip("242.1.0.50") {
		t.Error("a retired pool still translates")
	}
}

func TestSetRulesRefusesBadRules(t *testing.T) {
	mod := func(f func(*Rules)) Rules { r := testRules(); f(&r); return r }
	for _, tt := range []struct {
		name, field string
		r           Rules
	}{
		{"no global CIDR", "Rules.Global", mod(func(r *Rules) { r.Global = netip.Prefix{} })},
		{"global CIDR in 169.254.0.0/16", "Rules.Global", mod(func(r *Rules) { r.Global = pfx("169.254.0.0/16") })},
		{"pool IP outside Global", "Rules.Pools[0].IPs[0]", mod(func(r *Rules) { r.Pools[0].IPs[0] = ip("242.9.0.1") })},
		{"cluster egress IP outside Global", "Rules.ClusterEgress[0]", mod(func(r *Rules) { r.ClusterEgress[0] = ip("169.254.0.1") })},
		{"one IP in two pools", "Rules.Pools[1].IPs[0]", mod(func(r *Rules) { r.Pools[1].IPs[0] = ip("242.1.0.50") })},
		{"ingress IP also an egress IP", "Rules.Ingress[0].Global", mod(func(r *Rules) { r.Ingress[0].Global = ip("242.1.0.1") })},
		{"overlapping members of one kind", "Rules.Pools[1].Members[0]", mod(func(r *Rules) {
			r.Pools[1].Kind = PoolNamespace
		})},
		{"member outside Local", "Rules.Pools[0].Members[0]", mod(func(r *Rules) { r.Pools[0].Members[0] = pfx("192.168.0.0/24") })},
		{"remote overlapping Global", "Rules.Remotes[0]", mod(func(r *Rules) { r.Remotes[0] = pfx("242.1.0.0/16") })},
		{"remote of the other family", "Rules.Remotes[0]", mod(func(r *Rules) { r.Remotes[0] = pfx("fd42:2::/64") })},
		{"local in 169.254.0.0/16", "Rules.Local[3]", mod(func(r *Rules) { r.Local = append(r.Local, pfx("169.254.1.0/24")) })},
		{"ingress local outside Local", "Rules.Ingress[0].Local", mod(func(r *Rules) { r.Ingress[0].Local = ip("192.168.0.1") })},
		{"duplicate names", "Rules.Ingress[0].Name", mod(func(r *Rules) { r.Ingress[0].Name = "ns-blue" })},
		{"pool without IPs", "Rules.Pools[0]", mod(func(r *Rules) { r.Pools[0].IPs = nil })},
		{"bad pool kind", "Rules.Pools[0].Kind", mod(func(r *Rules) { r.Pools[0].Kind = 9 })},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e, _ := New(Config{})
			err := e.SetRules(tt.r)
			if err == nil || !contains(err.Error(), tt.field) {
				t.Errorf("SetRules = %v, want an error naming %s", err, tt.field)
			}
		})
	}
}

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}

func TestNewRefusesBadConfig(t *testing.T) {
	for _, c := range []Config{
		{MaxFlows: -1},
		{MaxFragments: -5},
		{Timeouts: Timeouts{UDP: -time.Second}},
		{Timeouts: Timeouts{TCPEstablished: 48 * time.Hour}},
	} {
		if _, err := New(c); err == nil {
			t.Errorf("New(%+v) = nil error", c)
		}
	}
}
