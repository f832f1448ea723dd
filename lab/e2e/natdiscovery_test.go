package e2e

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"

	"github.com/snorkel-net/snorkel/controller/api"
	submv1 "github.com/snorkel-net/snorkel/controller/api/v1"
	"github.com/snorkel-net/snorkel/controller/broker"
	"github.com/snorkel-net/snorkel/controller/kubelocal"
	"github.com/snorkel-net/snorkel/lab"
	"github.com/snorkel-net/snorkel/lab/topo"
	"github.com/snorkel-net/snorkel/transport"
)

// The discovery test's third cluster, c3, sits on the internet itself, as a
// cluster on a public network does: its private IP is reachable from both
// clouds. The API servers (broker and members) listen on the internet too.
var (
	hubIP      = netip.MustParseAddr("203.0.113.3")
	hubPods    = netip.MustParsePrefix("10.3.0.0/16")
	hubTUN     = netip.MustParseAddr("10.3.0.1")
	kubeInet   = netip.MustParseAddr("203.0.113.254")
	movedInet2 = netip.MustParseAddr("203.0.113.12")
)

// discoveryRouter is both clouds' router in the discovery test: an elastic
// IP, forwarding the tunnel and discovery ports to the gateway and
// masquerading what leaves. Only what is sent to the router's own address
// is forwarded: after the router moves, a remote's stale neighbour entry
// still sends it packets for the old address, and forwarding those would
// make the gateway's own flows their replies, sent from the old address.
const discoveryRouter = `
table ip nat {
	chain prerouting {
		type nat hook prerouting priority dstnat;
		iifname "inet" fib daddr type local udp dport { 4490, 4500 } dnat to %s
	}
	chain postrouting {
		type nat hook postrouting priority srcnat;
		oifname "inet" ip saddr %s masquerade
	}
}`

// kubeSettle bounds a wait on the agents: they elect a leader, publish,
// probe and configure their gateways through API servers that share the
// machine's cores with everything else.
const kubeSettle = 3 * settle

// TestNATDiscoveryLearnsPublicIPs is the proof that gateways behind NATs
// need no public IP given. c1 and c2 each sit behind its cloud's router,
// with no route between the private networks; c3 is on the internet. Real
// agents on real API servers run the gateways, and no --public-ip or node
// annotation is set. Each NATed gateway must learn its router's address
// from what the others see and publish it; c1 and c2 must reach each other
// at those public addresses across NAT, and c3 at its private IP, which
// answers; c3 must reach both at their learned public IPs; TCP streams must
// run both ways between c1 and c2. Then c2's router moves to another
// address and forgets its mappings: c2's learned public IP must follow, and
// the streams must survive.
func TestNATDiscoveryLearnsPublicIPs(t *testing.T) {
	needRoot(t)
	if os.Getenv("SNORKEL_KUBE_APISERVER") == "" {
		t.Skip("SNORKEL_KUBE_APISERVER is not set: run the tests through `make test`, which builds kube-apiserver into .cache/bin")
	}
	e := upDiscovery(t)
	pub := [2]netip.Addr{natPublic[0], natPublic[1]}
	e.waitConverged(pub)

	streams := []*liveStream{
		startStream(t, "c1→c2", e.gw[0], e.gw[1], netip.AddrPortFrom(natTUN[1], liveStreamPort), 1),
		startStream(t, "c2→c1", e.gw[1], e.gw[0], netip.AddrPortFrom(natTUN[0], liveStreamPort+1), 2),
	}
	moved := &natEnv{t: t}
	moved.waitMoved(streams, "before c2's router moved")

	// The old address goes first: the kernel drops a subnet's secondary
	// addresses with its primary.
	r := e.router[1]
	if _, err := r.Run(t.Context(), "ip", "addr", "del", netip.PrefixFrom(natPublic[1], 24).String(), "dev", "inet"); err != nil {
		t.Fatal(err)
	}
	if err := r.AddAddr("inet", netip.PrefixFrom(movedInet2, 24)); err != nil {
		t.Fatal(err)
	}
	if err := r.Do(func() error { return netlink.ConntrackTableFlush(netlink.ConntrackTable) }); err != nil {
		t.Fatalf("flush c2's router's connection tracking: %v", err)
	}
	t.Logf("c2's router moved from %v to %v", natPublic[1], movedInet2)
	pub[1] = movedInet2
	e.waitConverged(pub)
	moved.waitMoved(streams, "after c2's router moved")
	for _, s := range streams {
		t.Logf("stream %s: longest stall %v", s.name, s.stall())
		s.finish()
	}
	for _, s := range streams {
		if err := s.result(); err != nil {
			t.Errorf("stream %s: %v", s.name, err)
		}
	}
}

// discoveryEnv is the running discovery topology: the NATed clouds' gateway
// and router namespaces by index (c1, c2), the hub's gateway, and each
// member's API server.
type discoveryEnv struct {
	t       *testing.T
	gw      [2]*topo.NS
	router  [2]*topo.NS
	hub     *topo.NS
	members map[string]dynamic.Interface
}

func upDiscovery(t *testing.T) *discoveryEnv {
	t.Helper()
	tp := newTopology(t, "nd")
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	e := &discoveryEnv{t: t, members: map[string]dynamic.Interface{}}
	inet, err := tp.NewNS("inet")
	must(err)
	must(inet.Bridge("br"))
	must(inet.AddAddr("br", netip.PrefixFrom(kubeInet, 24)))
	for i := range 2 {
		e.gw[i], e.router[i], err = behindRouter(tp, i)
		must(err)
		port := fmt.Sprintf("r%d", i+1)
		must(topo.Veth(e.router[i], "inet", inet, port))
		must(inet.SetMaster(port, "br"))
		must(e.router[i].AddAddr("inet", netip.PrefixFrom(natPublic[i], 24)))
		must(e.router[i].Nft(t.Context(), fmt.Sprintf(discoveryRouter, natGW[i], netip.PrefixFrom(natGW[i], 24).Masked())))
	}
	e.hub, err = tp.NewNS("gw3")
	must(err)
	must(topo.Veth(e.hub, "eth0", inet, "h3"))
	must(inet.SetMaster("h3", "br"))
	must(e.hub.AddAddr("eth0", netip.PrefixFrom(hubIP, 24)))
	for i := range 2 {
		if out, err := e.router[i].Run(t.Context(), "ip", "route", "get", natGW[1-i].String()); err == nil {
			t.Fatalf("router %d has a route to the other cloud's gateway: %s", i+1, out)
		}
	}

	clusters := []struct {
		id        string
		ns        *topo.NS
		private   netip.Addr
		pods      netip.Prefix
		tun       netip.Addr
		services  string
		apiServer *kubelocal.Server
	}{
		{id: "c1", ns: e.gw[0], private: natGW[0], pods: natPods[0], tun: natTUN[0], services: "100.64.1.0/24"},
		{id: "c2", ns: e.gw[1], private: natGW[1], pods: natPods[1], tun: natTUN[1], services: "100.64.2.0/24"},
		{id: "c3", ns: e.hub, private: hubIP, pods: hubPods, tun: hubTUN, services: "100.64.3.0/24"},
	}
	names := []string{lab.BrokerName}
	cidrs := []string{""}
	for _, c := range clusters {
		names = append(names, c.id)
		cidrs = append(cidrs, c.services)
	}
	dir := t.TempDir()
	servers := make([]*kubelocal.Server, len(names))
	errs := make([]error, len(names))
	var wg sync.WaitGroup
	for i, name := range names {
		wg.Go(func() {
			servers[i], errs[i] = kubelocal.Start(t.Context(), kubelocal.Options{
				Name:        name,
				Dir:         filepath.Join(dir, name),
				ServiceCIDR: cidrs[i],
				Address:     kubeInet.String(),
				Spawn: func(proc, bin string, args ...string) (kubelocal.Process, error) {
					return inet.Start("kube-"+name+"-"+proc, bin, args...)
				},
				Dial: inet.DialContext,
			})
		})
	}
	wg.Wait()
	must(errors.Join(errs...))

	d, err := broker.Deploy(t.Context(), servers[0].Config(), broker.BrokerOptions{})
	must(err)
	for i := range clusters {
		c := &clusters[i]
		c.apiServer = servers[i+1]
		_, err := broker.Join(t.Context(), c.apiServer.Config(), d.Info, broker.JoinOptions{
			ClusterID:    c.id,
			CableDriver:  transport.WireGuard,
			ClusterCIDRs: []string{c.pods.String()},
			ServiceCIDRs: []string{c.services},
		})
		must(err)
		e.members[c.id], err = dynamic.NewForConfig(c.apiServer.Config())
		must(err)
		// No --public-ip, and no Node carries the public IP annotation.
		_, err = c.ns.Start("agent-"+c.id, snorkelBin, "agent",
			"--kubeconfig", c.apiServer.Kubeconfig,
			"--node-name", c.id+"-gw",
			"--private-ip", c.private.String(),
			"--health-check-ip", c.tun.String(),
			// WireGuard's UAPI socket is named after the TUN device in the
			// host's directory: a name of this run's own.
			"--tun", fmt.Sprintf("nd%d%s", os.Getpid()%100000, c.id),
			"--metrics-address", "",
			"--debug-address", lab.DebugAddress,
			"--wireguard-key-file", filepath.Join(dir, c.id+".key"))
		must(err)
	}
	return e
}

// link is what one gateway should use for a remote: its address, and
// whether that is across NAT.
type link struct {
	ip  netip.Addr
	nat bool
}

func (l link) String() string {
	if l.nat {
		return l.ip.String() + " across NAT"
	}
	return l.ip.String()
}

// waitConverged waits until every gateway publishes the public IP it should
// have learned (pub for c1 and c2, none for c3, which no NAT hides) and is
// connected to each remote at the address discovery should choose: the
// other cloud at its public IP across NAT, c3 at its private IP.
func (e *discoveryEnv) waitConverged(pub [2]netip.Addr) {
	e.t.Helper()
	want := map[string]struct {
		public netip.Addr
		links  map[string]link
	}{
		"c1": {pub[0], map[string]link{"c2": {pub[1], true}, "c3": {hubIP, false}}},
		"c2": {pub[1], map[string]link{"c1": {pub[0], true}, "c3": {hubIP, false}}},
		"c3": {netip.Addr{}, map[string]link{"c1": {pub[0], true}, "c2": {pub[1], true}}},
	}
	ctx, cancel := context.WithTimeout(e.t.Context(), kubeSettle)
	defer cancel()
	for id, w := range want {
		var last error
		for {
			err := e.converged(ctx, id, w.public, w.links)
			if err == nil {
				published := "none"
				if w.public.IsValid() {
					published = w.public.String()
				}
				e.t.Logf("%s: public IP %s; connections %v", id, published, w.links)
				break
			}
			if ctx.Err() == nil || last == nil {
				// What the deadline cut short says less than what came
				// before it.
				last = err
			}
			if ctx.Err() != nil {
				for i := range e.router {
					e.t.Logf("router %d's UDP connection tracking:\n%s", i+1, udpFlows(e.router[i]))
				}
				e.t.Fatalf("%s has not converged within %v: %v", id, kubeSettle, last)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
}

// converged says what of cluster id's Gateway status differs from the
// wanted public IP and connections; nil when nothing does.
func (e *discoveryEnv) converged(ctx context.Context, id string, public netip.Addr, links map[string]link) error {
	u, err := e.members[id].Resource(submv1.GatewayResource).Namespace(api.AgentNamespace).Get(ctx, id+"-gw", metav1.GetOptions{})
	if err != nil {
		return err
	}
	g, err := submv1.FromUnstructured[submv1.Gateway](u)
	if err != nil {
		return err
	}
	wantPublic := ""
	if public.IsValid() {
		wantPublic = public.String()
	}
	if got := g.Status.LocalEndpoint.PublicIP; got != wantPublic {
		return fmt.Errorf("it publishes public IP %q, want %q", got, wantPublic)
	}
	var seen []string
	for _, c := range g.Status.Connections {
		w, ok := links[c.Endpoint.ClusterID]
		if !ok {
			return fmt.Errorf("a connection to unexpected cluster %q", c.Endpoint.ClusterID)
		}
		if c.Status != submv1.Connected || c.UsingIP != w.ip.String() || c.UsingNAT != w.nat {
			return fmt.Errorf("to %s: %s (%s) using %s, NAT %v; want connected using %s, NAT %v",
				c.Endpoint.ClusterID, c.Status, c.StatusMessage, c.UsingIP, c.UsingNAT, w.ip, w.nat)
		}
		seen = append(seen, c.Endpoint.ClusterID)
	}
	if len(seen) != len(links) {
		return fmt.Errorf("connections to %v only", slices.Sorted(slices.Values(seen)))
	}
	return nil
}

// udpFlows lists the UDP flows a router's connection tracking holds, for a
// failure's log.
func udpFlows(r *topo.NS) string {
	var flows []*netlink.ConntrackFlow
	err := r.Do(func() error {
		var err error
		flows, err = netlink.ConntrackTableList(netlink.ConntrackTable, netlink.FAMILY_V4)
		return err
	})
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, f := range flows {
		if f.Forward.Protocol == 17 {
			fmt.Fprintf(&b, "%v:%d → %v:%d, reply %v:%d → %v:%d\n", f.Forward.SrcIP, f.Forward.SrcPort, f.Forward.DstIP, f.Forward.DstPort,
				f.Reverse.SrcIP, f.Reverse.SrcPort, f.Reverse.DstIP, f.Reverse.DstPort)
		}
	}
	return b.String()
}
