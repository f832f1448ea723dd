package e2e

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/snorkel-net/snorkel/gateway"
	"github.com/snorkel-net/snorkel/lab"
	"github.com/snorkel-net/snorkel/lab/topo"
)

// Pods of the Globalnet scenario the tests use. g1-pod-2 is also exported
// as a headless pod here, so that g2 has a pod of g1 to reach at a global IP
// of its own, for traffic and pings in that direction.
const (
	g1PodName  = "g1-pod-1"
	g1PeerName = "g1-pod-2"
	g2DBName   = "g2-db-0"
)

// gnEnv is a running Globalnet lab: g1 and g2 with the same pod and service
// CIDRs.
type gnEnv struct {
	lab       *lab.Lab
	transport string
	g1, g2    *topo.NS // gateway nodes
	g1Pod     *topo.NS
	g1Peer    *topo.NS
	g2DB      *topo.NS
	g1PodIP   netip.Addr
	// peerGlobal and dbGlobal are the headless pods' global IPs.
	peerGlobal netip.Addr
	dbGlobal   netip.Addr
	dbIP       netip.Addr
	g1Global   netip.Prefix
	g2Global   netip.Prefix
}

// globalnetScenario is lab.Globalnet with g1-pod-2 exported as headless.
func globalnetScenario() lab.Scenario {
	sc := lab.Globalnet()
	sc.Clusters[0].Services = append(sc.Clusters[0].Services, lab.ServiceSpec{
		Name: "peer", Headless: true, TargetPort: lab.WhereamiPort, Backends: []string{g1PeerName},
	})
	return sc
}

func upGlobalnet(t *testing.T, transport, tag string) *gnEnv {
	t.Helper()
	l := upScenario(t, globalnetScenario(), transport, tag)
	e := &gnEnv{lab: l, transport: transport}
	e.g1 = mustGateway(t, l, "g1")
	e.g2 = mustGateway(t, l, "g2")
	e.g1Pod, e.g1PodIP = mustPod(t, l, g1PodName)
	e.g1Peer, _ = mustPod(t, l, g1PeerName)
	e.g2DB, e.dbIP = mustPod(t, l, g2DBName)
	peer, _ := l.Plan.Pod(g1PeerName)
	db, _ := l.Plan.Pod(g2DBName)
	e.peerGlobal, e.dbGlobal = peer.GlobalIP, db.GlobalIP
	e.g1Global = l.Plan.Cluster("g1").Spec.GlobalCIDR
	e.g2Global = l.Plan.Cluster("g2").Spec.GlobalCIDR
	if !e.peerGlobal.IsValid() || !e.dbGlobal.IsValid() {
		t.Fatalf("the plan gave %s and %s no global IPs", g1PeerName, g2DBName)
	}
	// The gateway nodes answer TTL expiry and oversize packets; the
	// kernel's rate limit of one ICMP error per second and destination
	// would make the checks depend on their timing.
	for _, gw := range []*topo.NS{e.g1, e.g2} {
		if err := gw.Sysctl("net.ipv4.icmp_ratelimit", "0"); err != nil {
			t.Fatal(err)
		}
	}
	return e
}

// TestGlobalnet brings up the Globalnet scenario once per transport and
// checks traffic between clusters whose pod and service CIDRs are the same,
// through the real gateways and their NAT engines.
func TestGlobalnet(t *testing.T) {
	needRoot(t)
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			e := upGlobalnet(t, tr.name, "g"+tr.name[:1])
			t.Run("same_pod_ips_in_both_clusters", e.testSameAddresses)
			t.Run("ping_global_ips_both_ways", e.testPing)
			t.Run("backend_sees_global_source", e.testSourceSeen)
			t.Run("tcp_100MiB_arrives_intact_both_ways", e.testTCPBulk)
			t.Run("udp_datagrams_up_to_path_mtu_echo_intact", e.testUDPEcho)
			t.Run("ttl_expiry_in_g2_arrives_translated", e.testTTLExceeded)
			t.Run("frag_needed_in_g2_arrives_translated", e.testFragNeeded)
			t.Run("flows_and_nat_metrics_show_a_live_flow", e.testFlows)
		})
	}
}

func (e *gnEnv) testSameAddresses(t *testing.T) {
	g2Pod, ok := e.lab.Plan.Pod("g2-web-1")
	if !ok || g2Pod.IP != e.g1PodIP {
		t.Fatalf("g2-web-1 has %v, want %s like %s: the scenario must overlap", g2Pod.IP, e.g1PodIP, g1PodName)
	}
}

// clusterEgress returns the cluster egress IPs a gateway reports.
func clusterEgress(t *testing.T, gw *topo.NS) []netip.Addr {
	t.Helper()
	var st gateway.Stats
	if err := getJSON(t.Context(), gw, "/status", &st); err != nil {
		t.Fatal(err)
	}
	if st.Globalnet == nil || len(st.Globalnet.ClusterEgressIPs) != gateway.DefaultClusterEgressIPs {
		t.Fatalf("gateway in %s reports Globalnet %+v; want %d cluster egress IPs", gw, st.Globalnet, gateway.DefaultClusterEgressIPs)
	}
	return st.Globalnet.ClusterEgressIPs
}

func (e *gnEnv) testPing(t *testing.T) {
	for _, tc := range []struct {
		from     *topo.NS
		fromName string
		to       netip.Addr
	}{
		{e.g1Pod, g1PodName, e.dbGlobal},
		{e.g2DB, g2DBName, e.peerGlobal},
	} {
		unanswered, out := pingEach(t.Context(), tc.from, tc.to, 3)
		if len(unanswered) > 0 {
			t.Errorf("ping %s → %s: echo requests %v of 3 unanswered:\n%s", tc.fromName, tc.to, unanswered, out)
		}
		// ping counts only replies from the address it pinged: the
		// reply's source was translated back to the global IP.
		if !strings.Contains(out, "from "+tc.to.String()) && len(unanswered) < 3 {
			t.Errorf("ping %s → %s: replies did not come from %s:\n%s", tc.fromName, tc.to, tc.to, out)
		}
	}
}

// acceptOnce listens in ns on port and returns the remote address of the
// first connection.
func acceptOnce(t *testing.T, ns *topo.NS, port uint16) <-chan netip.AddrPort {
	t.Helper()
	ln, err := ns.Listen("tcp", anyAddr(port))
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan netip.AddrPort, 1)
	go func() {
		defer ln.Close()
		c, err := ln.Accept()
		if err != nil {
			close(got)
			return
		}
		c.Close()
		ap := c.RemoteAddr().(*net.TCPAddr).AddrPort()
		// A wildcard listener is dual-stack: IPv4 peers come mapped.
		got <- netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	}()
	return got
}

func (e *gnEnv) testSourceSeen(t *testing.T) {
	egress := clusterEgress(t, e.g1)
	for _, tc := range []struct {
		name     string
		from, to *topo.NS
		dst      netip.Addr
		want     func(netip.Addr) bool
		wantText string
	}{
		{g1PodName + "→" + g2DBName, e.g1Pod, e.g2DB, e.dbGlobal,
			func(a netip.Addr) bool { return slices.Contains(egress, a) }, fmt.Sprintf("one of g1's cluster egress IPs %v", egress)},
		{g2DBName + "→" + g1PeerName, e.g2DB, e.g1Peer, e.peerGlobal,
			func(a netip.Addr) bool { return a == e.dbGlobal }, fmt.Sprintf("%s, %s's own global IP", e.dbGlobal, g2DBName)},
	} {
		const port = 5010
		got := acceptOnce(t, tc.to, port)
		c, err := tc.from.DialContext(t.Context(), "tcp", netip.AddrPortFrom(tc.dst, port).String())
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		c.Close()
		select {
		case ap := <-got:
			if !tc.want(ap.Addr()) {
				t.Errorf("%s: the server saw %s; want %s", tc.name, ap, tc.wantText)
			}
		case <-time.After(settle):
			t.Errorf("%s: the server accepted nothing", tc.name)
		}
	}
}

func (e *gnEnv) testTCPBulk(t *testing.T) {
	const size = 100 << 20
	for i, tc := range []struct {
		name     string
		from, to *topo.NS
		dst      netip.Addr
	}{
		{g1PodName + "→" + g2DBName, e.g1Pod, e.g2DB, e.dbGlobal},
		{g2DBName + "→" + g1PeerName, e.g2DB, e.g1Peer, e.peerGlobal},
	} {
		ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
		start := time.Now()
		err := transferTCP(ctx, tc.from, tc.to, netip.AddrPortFrom(tc.dst, 5011), size, uint64(i+21))
		cancel()
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		d := time.Since(start)
		t.Logf("%s (%s): %d MiB intact in %v (%.0f Mbit/s)", tc.name, tc.dst, size>>20, d.Round(time.Millisecond), float64(size)*8/d.Seconds()/1e6)
	}
}

func (e *gnEnv) testUDPEcho(t *testing.T) {
	var st gateway.Stats
	if err := getJSON(t.Context(), e.g1, "/status", &st); err != nil {
		t.Fatal(err)
	}
	max := st.MTU - 20 - 8
	sizes := []int{4, max, 5, max - 1, 64, 512, 1000, 1200}
	for s := 7; len(sizes) < 60; s += 97 {
		sizes = append(sizes, 4+s%(max-3))
	}
	const count = 200
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	res, err := echoDatagrams(ctx, e.g1Pod, e.g2DB, netip.AddrPortFrom(e.dbGlobal, 5012), sizes, count, 23)
	if err != nil {
		t.Fatal(err)
	}
	if lost := res.sent - res.echoed; lost > count/100 {
		t.Errorf("%d of %d datagrams (up to %d bytes) came back from %s; more than 1%% lost", res.echoed, res.sent, max, e.dbGlobal)
	}
	t.Logf("%d of %d datagrams of 4 to %d bytes echoed intact through %s", res.echoed, res.sent, max, e.dbGlobal)
}

var ttlExceeded = regexp.MustCompile(`From (\S+) icmp_seq=\d+ Time to live exceeded`)

// testTTLExceeded sends with TTL 2: g1's node forwards with TTL 1 into its
// TUN, and g2's node, forwarding to the pod, finds it expired and answers
// towards the packet's source, a g1 global egress IP. The answer crosses
// both NAT engines and must reach the g1 pod quoting the pod's own packet.
func (e *gnEnv) testTTLExceeded(t *testing.T) {
	// ping exits as soon as the error comes; -W bounds the wait if not.
	out, _ := e.g1Pod.Command(t.Context(), "ping", "-n", "-c", "1", "-t", "2", "-W", fmt.Sprint(int(settle/time.Second)), e.dbGlobal.String()).CombinedOutput()
	m := ttlExceeded.FindStringSubmatch(string(out))
	if m == nil {
		t.Errorf("ping -t 2 %s from %s got no \"Time to live exceeded\" (ping matches it to its own echo by the quoted destination and identifier):\n%s", e.dbGlobal, g1PodName, out)
	} else if from, err := netip.ParseAddr(m[1]); err != nil || !e.g2Global.Contains(from) {
		t.Errorf("\"Time to live exceeded\" came from %s; want an address of g2's global CIDR %s:\n%s", m[1], e.g2Global, out)
	} else {
		t.Logf("ping -t 2 %s: %s", e.dbGlobal, m[0])
	}

	// The traceroute way: a UDP probe, whose error reaches the socket only
	// if the quote carries the socket's own addresses and ports.
	dst := netip.AddrPortFrom(e.dbGlobal, 33434)
	got, err := probeUDP(t.Context(), e.g1Pod, dst, 2, 64, settle)
	switch {
	case err != nil:
		t.Errorf("UDP probe with TTL 2 from %s to %s: %v", g1PodName, dst, err)
	case got.typ != 11 || got.code != 0:
		t.Errorf("UDP probe with TTL 2 to %s: got %v; want type 11 (time exceeded) code 0", dst, got)
	case !e.g2Global.Contains(got.offender):
		t.Errorf("UDP probe with TTL 2 to %s: got %v; want it from g2's global CIDR %s", dst, got, e.g2Global)
	default:
		t.Logf("UDP probe with TTL 2 to %s: the socket got %v", dst, got)
	}
	// With a TTL that reaches the pod, the probe meets a closed port: the
	// same way back, from the pod's global IP itself.
	got, err = probeUDP(t.Context(), e.g1Pod, dst, 64, 64, settle)
	switch {
	case err != nil:
		t.Errorf("UDP probe to the closed port %s: %v", dst, err)
	case got.typ != 3 || got.code != 3 || got.offender != e.dbGlobal:
		t.Errorf("UDP probe to the closed port %s: got %v; want type 3 code 3 (port unreachable) from %s", dst, got, e.dbGlobal)
	}
}

// testFragNeeded narrows g2's node link to the pod below the tunnel's path
// MTU: a DF packet that crossed the tunnel is refused by g2's node, whose
// "fragmentation needed" must reach the g1 pod translated, so that its
// path MTU towards the global IP drops.
func (e *gnEnv) testFragNeeded(t *testing.T) {
	const narrow = 1200
	link := "v-" + g2DBName
	if err := e.g2.SetMTU(link, narrow); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := e.g2.SetMTU(link, underlayMTU); err != nil {
			t.Error(err)
		}
		if _, err := e.g1Pod.Run(context.Background(), "ip", "route", "flush", "cache"); err != nil {
			t.Error(err)
		}
	})
	size := narrow + 100 - 20 - 8
	_, got, out := ping(t.Context(), e.g1Pod, "-M", "do", "-s", fmt.Sprint(size), "-c", "1", "-W", fmt.Sprint(int(settle/time.Second)), e.dbGlobal.String())
	m := fragNeeded.FindStringSubmatch(out)
	switch {
	case got != 0:
		t.Errorf("a %d-byte DF packet crossed a %d-byte link:\n%s", size+28, narrow, out)
	case m == nil:
		t.Errorf("%s got no \"Frag needed\" for a %d-byte DF packet to %s:\n%s", g1PodName, size+28, e.dbGlobal, out)
	case m[2] != fmt.Sprint(narrow):
		t.Errorf("\"Frag needed\" says mtu %s; want %d:\n%s", m[2], narrow, out)
	default:
		t.Logf("ping -M do -s %d %s: %s", size, e.dbGlobal, m[0])
	}
	if _, err := e.g1Pod.Run(t.Context(), "ip", "route", "flush", "cache"); err != nil {
		t.Fatal(err)
	}

	dst := netip.AddrPortFrom(e.dbGlobal, 5013)
	perr, err := probeUDP(t.Context(), e.g1Pod, dst, 64, size, settle)
	switch {
	case err != nil:
		t.Errorf("UDP probe of %d bytes with DF to %s: %v", size, dst, err)
	case perr.typ != 3 || perr.code != 4 || perr.info != narrow:
		t.Errorf("UDP probe of %d bytes with DF to %s: got %v; want type 3 code 4 (fragmentation needed) with MTU %d", size, dst, perr, narrow)
	case !e.g2Global.Contains(perr.offender):
		t.Errorf("UDP probe to %s: got %v; want it from g2's global CIDR %s", dst, perr, e.g2Global)
	default:
		t.Logf("UDP probe of %d bytes with DF to %s: the socket got %v", size, dst, perr)
	}
	// The kernel took the error as being about its own route to the global
	// IP: the path MTU it caches is the narrowed link's.
	route, err := e.g1Pod.Run(t.Context(), "ip", "route", "get", e.dbGlobal.String())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(route), fmt.Sprintf("mtu %d", narrow)) {
		t.Errorf("%s's route to %s does not carry the learned path MTU %d: %s", g1PodName, e.dbGlobal, narrow, route)
	}
}

func (e *gnEnv) testFlows(t *testing.T) {
	const port = 5014
	ln, err := e.g2DB.Listen("tcp", anyAddr(port))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		if c, err := ln.Accept(); err == nil {
			accepted <- c
		}
	}()
	c, err := e.g1Pod.DialContext(t.Context(), "tcp", netip.AddrPortFrom(e.dbGlobal, port).String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	select {
	case s := <-accepted:
		defer s.Close()
	case <-time.After(settle):
		t.Fatal("no connection accepted")
	}
	local := c.LocalAddr().(*net.TCPAddr).AddrPort()

	var flows []gateway.FlowStatus
	if err := getJSON(t.Context(), e.g1, "/flows", &flows); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, f := range flows {
		if f.Original.Src != local || f.Original.Dst != netip.AddrPortFrom(e.dbGlobal, port) {
			continue
		}
		found = true
		// The replies come back to the address the pod was translated to.
		if f.Inbound || f.Protocol != "tcp" || f.State != "established" || !e.g1Global.Contains(f.Reply.Dst.Addr()) || f.Reply.Src != f.Original.Dst {
			t.Errorf("g1's flow for %s → %s:%d is %+v; want an outbound established tcp flow whose replies come from %s:%d to an address of %s", local, e.dbGlobal, port, f, e.dbGlobal, port, e.g1Global)
		}
	}
	if !found {
		t.Errorf("g1's /flows lists no flow for %s → %s:%d:\n%+v", local, e.dbGlobal, port, flows)
	}
	for _, name := range []string{"snorkel_nat_flows", "snorkel_nat_flows_created_total"} {
		if v := metricValue(t, e.g1, name, nil); v < 1 {
			t.Errorf("g1's %s is %v with a flow open; want at least 1", name, v)
		}
	}

	out, err := e.g1.Command(t.Context(), snorkelBin, "show", "flows", "--gateway", "http://"+lab.DebugAddress).CombinedOutput()
	if err != nil {
		t.Fatalf("snorkel show flows: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), local.String()) || !strings.Contains(string(out), "tcp") {
		t.Errorf("snorkel show flows does not show the flow from %s:\n%s", local, out)
	}
}

// metricAtLeast polls one sample of the /metrics of the gateway in gw until
// it reaches want, for up to settle, and returns the last value read: a
// gateway on a loaded host may count a packet a moment after the packet's
// fate was visible.
func metricAtLeast(t *testing.T, gw *topo.NS, name string, labels map[string]string, want float64) float64 {
	t.Helper()
	deadline := time.Now().Add(settle)
	for {
		v := metricValue(t, gw, name, labels)
		if v >= want || time.Now().After(deadline) {
			return v
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// metricValue fetches one sample from the /metrics of the gateway in gw.
func metricValue(t *testing.T, gw *topo.NS, name string, labels map[string]string) float64 {
	t.Helper()
	text, err := getText(t.Context(), gw, "/metrics")
	if err != nil {
		t.Fatalf("metrics of the gateway in %s: %v", gw, err)
	}
	v, err := sample(text, name, labels)
	if err != nil {
		t.Fatalf("metrics of the gateway in %s: %v", gw, err)
	}
	return v
}
