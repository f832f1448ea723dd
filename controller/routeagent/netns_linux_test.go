package routeagent

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/snorkel-net/snorkel/controller/api"
	submv1 "github.com/snorkel-net/snorkel/controller/api/v1"
	"github.com/snorkel-net/snorkel/controller/kubelocal"
	"github.com/snorkel-net/snorkel/controller/kubelocal/kubetest"
	"github.com/snorkel-net/snorkel/deploy"
	"github.com/snorkel-net/snorkel/lab/topo"
)

// settle bounds a wait for something that takes milliseconds on an idle
// machine; beside other tests on two busy cores it can take seconds. A
// passing run never waits it out.
const settle = time.Minute

// testTopology returns a topology with a prefix unique to this test
// process, closed at the end of the test, which fails if a namespace is
// left.
func testTopology(t *testing.T, tag string) *topo.Topology {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to create network namespaces (CAP_SYS_ADMIN and CAP_NET_ADMIN); run the tests as root")
	}
	dir := t.TempDir()
	prefix := fmt.Sprintf("t%d%s-", os.Getpid()%100000, tag)
	tp, err := topo.New(topo.Options{Prefix: prefix, LogDir: dir, StateFile: filepath.Join(dir, "state.json"), StopTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := tp.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		if left, err := topo.List(prefix); err != nil || len(left) > 0 {
			t.Errorf("namespaces left after Close: %v %v", left, err)
		}
	})
	return tp
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func newNS(t *testing.T, tp *topo.Topology, name string) *topo.NS {
	t.Helper()
	n, err := tp.NewNS(name)
	must(t, err)
	return n
}

// openTestNode opens the route agent's view of namespace ns, closed when
// t ends.
func openTestNode(t *testing.T, ns *topo.NS) (*node, netns.NsHandle) {
	t.Helper()
	h, err := netns.GetFromName(ns.Name())
	must(t, err)
	n, err := openNode(h)
	if err != nil {
		h.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		n.close()
		h.Close()
	})
	return n, h
}

// eventually waits until check returns "", failing with its last answer
// after settle.
func eventually(t *testing.T, what string, check func() string) {
	t.Helper()
	deadline := time.Now().Add(settle)
	for {
		msg := check()
		if msg == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %s", what, msg)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// lockedBuffer collects the route agent's log for the test to read.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// gateways writes Gateways to a test API server, as the gateway agents do.
type gateways struct {
	t   *testing.T
	dyn dynamic.Interface
}

// set creates or updates Gateway name with status st.
func (g gateways) set(name string, st submv1.GatewayStatus) {
	g.t.Helper()
	ctx := context.Background()
	r := g.dyn.Resource(submv1.GatewayResource).Namespace(api.AgentNamespace)
	u, err := r.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		obj, cerr := submv1.ToUnstructured(&submv1.Gateway{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: api.AgentNamespace}}, "Gateway")
		must(g.t, cerr)
		u, err = r.Create(ctx, obj, metav1.CreateOptions{})
		must(g.t, err)
	}
	withStatus, err := submv1.ToUnstructured(&submv1.Gateway{Status: st}, "Gateway")
	must(g.t, err)
	u.Object["status"] = withStatus.Object["status"]
	_, err = r.UpdateStatus(ctx, u, metav1.UpdateOptions{})
	must(g.t, err)
}

func status(ha submv1.HAStatus, node, ip string, subnets ...[]string) submv1.GatewayStatus {
	endpoint := func(cluster, node, ip string, subnets []string) submv1.EndpointSpec {
		return submv1.EndpointSpec{ClusterID: cluster, CableName: "submariner-cable-" + cluster + "-" + node, Hostname: node,
			Subnets: subnets, PrivateIP: ip, Backend: "wireguard"}
	}
	st := submv1.GatewayStatus{HAStatus: ha, LocalEndpoint: endpoint("c1", node, ip, []string{"10.1.0.0/16"}), Connections: []submv1.Connection{}}
	for i, s := range subnets {
		st.Connections = append(st.Connections, submv1.Connection{Status: submv1.Connected,
			Endpoint: endpoint(fmt.Sprintf("c%d", i+2), "remote", fmt.Sprintf("198.51.100.%d", i+2), s)})
	}
	return st
}

// kernelRoutes are the node's routes of RouteProtocol in the main table,
// as `ip route` shows them, sorted; a route of another metric says so.
func kernelRoutes(t *testing.T, n *node) []string {
	t.Helper()
	rs, err := n.routes()
	must(t, err)
	var out []string
	for _, r := range rs {
		s := routeDst(r).String()
		switch {
		case r.Type == unix.RTN_UNREACHABLE:
			s = "unreachable " + s
		default:
			s += " via " + r.Gw.String()
		}
		if r.Priority != RouteMetric {
			s += fmt.Sprintf(" metric %d", r.Priority)
		}
		out = append(out, s)
	}
	slices.Sort(out)
	return out
}

// setElements reads the route agent's set back with nft, as an operator
// would: the prefixes it holds, sorted, or an error.
func setElements(ctx context.Context, ns *topo.NS) ([]string, error) {
	out, err := ns.Run(ctx, "nft", "-j", "list", "table", "ip", TableName)
	if err != nil {
		return nil, err
	}
	var doc struct {
		Nftables []map[string]json.RawMessage `json:"nftables"`
	}
	if err := json.Unmarshal(out, &doc); err != nil {
		return nil, err
	}
	var elems []string
	found := false
	for _, o := range doc.Nftables {
		raw, ok := o["set"]
		if !ok {
			continue
		}
		var set struct {
			Name string            `json:"name"`
			Elem []json.RawMessage `json:"elem"`
		}
		if err := json.Unmarshal(raw, &set); err != nil {
			return nil, err
		}
		if set.Name != SetName {
			continue
		}
		found = true
		for _, e := range set.Elem {
			var p struct {
				Prefix struct {
					Addr string `json:"addr"`
					Len  int    `json:"len"`
				} `json:"prefix"`
			}
			if err := json.Unmarshal(e, &p); err != nil || p.Prefix.Addr == "" {
				return nil, fmt.Errorf("set element %s is not a prefix", e)
			}
			elems = append(elems, fmt.Sprintf("%s/%d", p.Prefix.Addr, p.Prefix.Len))
		}
	}
	if !found {
		return nil, fmt.Errorf("no set %s in %s", SetName, out)
	}
	slices.Sort(elems)
	return elems, nil
}

// TestRouteAgentFollowsTheActiveGateway runs the route agent against a
// real API server for a node in a network namespace whose underlay subnet
// holds two gateway nodes, 172.31.0.1 and 172.31.0.2, and moves the
// active gateway around.
func TestRouteAgentFollowsTheActiveGateway(t *testing.T) {
	tp := testTopology(t, "ra")
	worker, peers := newNS(t, tp, "worker"), newNS(t, tp, "peers")
	must(t, topo.Veth(worker, "eth0", peers, "eth0"))
	must(t, worker.AddAddr("eth0", netip.MustParsePrefix("172.31.0.10/24")))
	must(t, peers.AddAddr("eth0", netip.MustParsePrefix("172.31.0.1/24")))
	must(t, peers.AddAddr("eth0", netip.MustParsePrefix("172.31.0.2/24")))
	n, h := openTestNode(t, worker)

	srv := kubetest.Start(t, kubelocal.Options{Name: "routeagent"})[0]
	cfg := srv.Config()
	must(t, deploy.ApplyCRDs(context.Background(), cfg, false))
	kc := kubernetes.NewForConfigOrDie(cfg)
	_, err := kc.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: api.AgentNamespace}}, metav1.CreateOptions{})
	must(t, err)
	g := gateways{t: t, dyn: dynamic.NewForConfigOrDie(cfg)}

	c2, c3 := []string{"10.2.0.0/16", "10.102.0.0/16"}, []string{"10.33.0.0/16"}
	const passive, active = submv1.HAStatusPassive, submv1.HAStatusActive
	g.set("gw1", status(active, "gw1", "172.31.0.1", c2, c3))
	g.set("gw2", status(passive, "gw2", "172.31.0.2"))

	var logs lockedBuffer
	ra, err := New(Config{
		Dynamic:  g.dyn,
		NodeName: "worker",
		Resync:   200 * time.Millisecond,
		Logger:   slog.New(slog.NewTextHandler(&logs, nil)),
		netNS:    &h,
	})
	must(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ra.Run(ctx) }()
	stop := sync.OnceValue(func() error {
		cancel()
		return <-done
	})
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Errorf("Run: %v", err)
		}
		t.Logf("route agent's log:\n%s", logs.String())
	})

	expect := func(what string, routes, set []string) {
		t.Helper()
		eventually(t, what, func() string {
			if have := kernelRoutes(t, n); !slices.Equal(have, routes) {
				return fmt.Sprintf("routes of protocol %d %q, want %q", RouteProtocol, have, routes)
			}
			have, err := setElements(ctx, worker)
			if err != nil {
				return err.Error()
			}
			if !slices.Equal(have, set) {
				return fmt.Sprintf("set %s holds %q, want %q", SetName, have, set)
			}
			return ""
		})
	}
	all := []string{"10.102.0.0/16", "10.2.0.0/16", "10.33.0.0/16"} // sorted as strings; apart, so nft shows them as given
	via := func(gw string, cidrs ...string) []string {
		var out []string
		for _, c := range cidrs {
			if gw == "" {
				out = append(out, "unreachable "+c)
			} else {
				out = append(out, c+" via "+gw)
			}
		}
		return out
	}

	expect("a worker routes the remote CIDRs via the active gateway", via("172.31.0.1", all...), all)

	rs, err := n.routes()
	must(t, err)
	must(t, n.nl.RouteDel(&rs[0]))
	expect("a route deleted by hand comes back at the resync", via("172.31.0.1", all...), all)

	g.set("gw1", status(passive, "gw1", "172.31.0.1"))
	g.set("gw2", status(active, "gw2", "172.31.0.2", c2, c3))
	expect("the routes follow the active gateway to another node", via("172.31.0.2", all...), all)

	g.set("gw2", status(active, "gw2", "192.0.2.9", c2, c3))
	expect("a next hop off the node's subnets leaves the remote CIDRs unreachable", via("", all...), all)
	eventually(t, "the error names the fix", func() string {
		if !strings.Contains(logs.String(), "same L2 subnet") {
			return "no log line says the gateway node must share the nodes' L2 subnet"
		}
		return ""
	})
	g.set("gw2", status(active, "gw2", "172.31.0.2", c2, c3))
	expect("once the next hop is reachable the routes are set", via("172.31.0.2", all...), all)

	g.set("worker", status(active, "worker", "172.31.0.10", c2, c3))
	g.set("gw2", status(passive, "gw2", "172.31.0.2"))
	expect("on the active gateway's node the TUN's routes serve and the agent's go", nil, all)

	g.set("worker", status(passive, "worker", "172.31.0.10"))
	expect("with no active gateway the remote CIDRs are unreachable", via("", all...), all)

	g.set("gw2", status(active, "gw2", "172.31.0.2", c2))
	expect("a remote that left is pruned", via("172.31.0.2", "10.102.0.0/16", "10.2.0.0/16"), []string{"10.102.0.0/16", "10.2.0.0/16"})

	g.set("gw2", status(active, "gw2", "172.31.0.2"))
	expect("with no connections nothing is routed", nil, nil)

	g.set("gw2", status(active, "gw2", "172.31.0.2", c3))
	expect("a new remote is routed", via("172.31.0.2", "10.33.0.0/16"), []string{"10.33.0.0/16"})

	// A gateway that takes over holds the Lease before it writes its
	// status: the routes follow the Lease at once.
	g.set("gw1", status(passive, "gw1", "172.31.0.1"))
	holder := "gw1"
	lease, err := kc.CoordinationV1().Leases(api.AgentNamespace).Create(ctx, &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: api.GatewayLeaseName},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: &holder},
	}, metav1.CreateOptions{})
	must(t, err)
	expect("the Lease's new holder gets the routes before its status says active", via("172.31.0.1", "10.33.0.0/16"), []string{"10.33.0.0/16"})
	lease.Spec.HolderIdentity = nil
	_, err = kc.CoordinationV1().Leases(api.AgentNamespace).Update(ctx, lease, metav1.UpdateOptions{})
	must(t, err)
	expect("a released Lease leaves the Gateways' status to decide", via("172.31.0.2", "10.33.0.0/16"), []string{"10.33.0.0/16"})
	must(t, stop())
	if have := kernelRoutes(t, n); !slices.Equal(have, via("172.31.0.2", "10.33.0.0/16")) {
		t.Errorf("after the route agent stopped, routes %q: want them left in place for its successor", have)
	}

	removed, err := n.removeRoutes()
	must(t, err)
	table, err := n.removeBypass()
	must(t, err)
	if !slices.Equal(removed, prefixes("10.33.0.0/16")) || !table {
		t.Errorf("uninstall removed routes to %v and the table %v, want 10.33.0.0/16 and true", removed, table)
	}
	if have := kernelRoutes(t, n); len(have) > 0 {
		t.Errorf("after uninstall, routes %q", have)
	}
	if _, err := worker.Run(context.Background(), "nft", "list", "table", "ip", TableName); err == nil {
		t.Errorf("after uninstall, table ip %s is still there", TableName)
	}
}

// TestBypassKeepsThePodSourcePastTheCNIMasquerade sends UDP from a pod
// through its node, whose CNI masquerades what leaves the pod network, to
// a remote cluster's address behind the gateway node: without the route
// agent's table the gateway sees the node's address, with it the pod's.
func TestBypassKeepsThePodSourcePastTheCNIMasquerade(t *testing.T) {
	tp := testTopology(t, "mq")
	pod, nodeNS, gw := newNS(t, tp, "pod"), newNS(t, tp, "node"), newNS(t, tp, "gw")
	must(t, topo.Veth(pod, "eth0", nodeNS, "pod0"))
	must(t, topo.Veth(nodeNS, "gw0", gw, "eth0"))
	must(t, pod.AddAddr("eth0", netip.MustParsePrefix("10.8.1.5/24")))
	must(t, pod.AddRoute(topo.Route{Dst: netip.MustParsePrefix("0.0.0.0/0"), Via: netip.MustParseAddr("10.8.1.1")}))
	must(t, nodeNS.AddAddr("pod0", netip.MustParsePrefix("10.8.1.1/24")))
	must(t, nodeNS.AddAddr("gw0", netip.MustParsePrefix("172.31.0.2/24")))
	must(t, nodeNS.Sysctl("net.ipv4.ip_forward", "1"))
	ctx, cancel := context.WithTimeout(context.Background(), settle)
	defer cancel()
	must(t, nodeNS.Nft(ctx, `table ip cni {
	chain post {
		type nat hook postrouting priority srcnat;
		ip saddr 10.8.0.0/16 ip daddr != 10.8.0.0/16 masquerade
	}
}`))
	must(t, gw.AddAddr("eth0", netip.MustParsePrefix("172.31.0.1/24")))
	must(t, gw.AddAddr("lo", netip.MustParsePrefix("10.9.0.1/32")))
	must(t, gw.AddRoute(topo.Route{Dst: netip.MustParsePrefix("10.8.0.0/16"), Via: netip.MustParseAddr("172.31.0.2")}))

	n, _ := openTestNode(t, nodeNS)
	must(t, n.syncRoutes([]route{{dst: netip.MustParsePrefix("10.9.0.0/16"), via: netip.MustParseAddr("172.31.0.1")}}))

	l, err := gw.ListenPacket("udp4", "10.9.0.1:7777")
	must(t, err)
	defer l.Close()
	source := func() string {
		t.Helper()
		// A new socket is a new connection, which the nat chains see
		// afresh.
		c, err := pod.DialContext(ctx, "udp4", "10.9.0.1:7777")
		must(t, err)
		defer c.Close()
		_, err = c.Write([]byte("hello"))
		must(t, err)
		must(t, l.SetReadDeadline(time.Now().Add(settle)))
		buf := make([]byte, 64)
		_, from, err := l.ReadFrom(buf)
		must(t, err)
		ap, err := netip.ParseAddrPort(from.String())
		must(t, err)
		return ap.Addr().String()
	}
	if got := source(); got != "172.31.0.2" {
		t.Fatalf("without the bypass the remote sees %s, want the node's 172.31.0.2 (is the CNI's masquerade there?)", got)
	}
	must(t, n.syncBypass(prefixes("10.9.0.0/16")))
	if got := source(); got != "10.8.1.5" {
		t.Errorf("with the bypass the remote sees %s, want the pod's 10.8.1.5", got)
	}
	// Routes and table written a second time change nothing.
	must(t, n.syncBypass(prefixes("10.9.0.0/16")))
	if got := source(); got != "10.8.1.5" {
		t.Errorf("after the table was written again the remote sees %s, want the pod's 10.8.1.5", got)
	}
}
