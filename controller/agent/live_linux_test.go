package agent

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	submv1 "github.com/snorkel-net/snorkel/controller/api/v1"
	"github.com/snorkel-net/snorkel/controller/broker"
	"github.com/snorkel-net/snorkel/controller/kubelocal"
	"github.com/snorkel-net/snorkel/controller/kubelocal/kubetest"
	"github.com/snorkel-net/snorkel/gateway"
	"github.com/snorkel-net/snorkel/transport"
	"github.com/snorkel-net/snorkel/transport/wireguard"
)

// liveTUN names c1's TUN device, inside the test's namespace.
const liveTUN = "snk-live"

// liveUAPI names the WireGuard UAPI socket of c1's gateway. The socket
// lives in the host's /var/run/wireguard whatever the namespace, where this
// test may be running at the same time from another checkout.
var liveUAPI = fmt.Sprintf("snk-live-%d", os.Getpid())

// nodeNS is one OS thread inside a fresh network namespace that has an
// underlay, as a gateway node has. A namespace belongs to a thread, and
// goroutines the runtime starts run in the host's, so whatever creates a
// device, a socket or a route there runs on this thread (do).
type nodeNS struct {
	calls chan func()
}

// newNodeNS makes the namespace; it goes when t ends.
func newNodeNS(t *testing.T) *nodeNS {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to create a network namespace and a TUN device")
	}
	n := &nodeNS{calls: make(chan func())}
	ready := make(chan error, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		// The thread is never unlocked, so it ends with this goroutine
		// instead of going back to the runtime's pool inside the
		// namespace, and the namespace ends with it.
		runtime.LockOSThread()
		ns, err := netns.New()
		if err != nil {
			ready <- err
			return
		}
		defer ns.Close()
		if err := addUnderlay(); err != nil {
			ready <- err
			return
		}
		ready <- nil
		for f := range n.calls {
			f()
		}
	}()
	if err := <-ready; err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		close(n.calls)
		<-done
	})
	return n
}

// do runs f on the namespace's thread. f must not end its goroutine, so it
// reports failures instead of calling t.Fatal.
func (n *nodeNS) do(f func()) {
	done := make(chan struct{})
	n.calls <- func() {
		defer close(done)
		f()
	}
	<-done
}

// addUnderlay gives the current namespace the node's address towards the
// other gateways, 198.18.0.1/24, and a default route through it: what the
// guard must keep the remotes' traffic from while no TUN device routes it.
func addUnderlay() error {
	ul := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "snk-ul"}, PeerName: "snk-ul-peer"}
	if err := netlink.LinkAdd(ul); err != nil {
		return fmt.Errorf("underlay: %w", err)
	}
	for _, name := range []string{"snk-ul", "snk-ul-peer"} {
		if err := netlink.LinkSetUp(&netlink.Device{LinkAttrs: netlink.LinkAttrs{Name: name}}); err != nil {
			return fmt.Errorf("underlay: %w", err)
		}
	}
	addr, _ := netlink.ParseAddr("198.18.0.1/24")
	if err := netlink.AddrAdd(ul, addr); err != nil {
		return fmt.Errorf("underlay: %w", err)
	}
	if err := netlink.RouteAdd(&netlink.Route{LinkIndex: ul.Attrs().Index, Gw: net.ParseIP("198.18.0.2")}); err != nil {
		return fmt.Errorf("underlay: %w", err)
	}
	return nil
}

// node is what the namespace shows of the gateway: the TUN device's index
// (0 when there is none), the CIDRs routed into it and those the guard
// covers, each sorted.
type node struct {
	tunIndex        int
	routed, guarded []string
}

func (n *nodeNS) look() (node, error) {
	var nd node
	var err error
	n.do(func() { nd, err = lookNode() })
	return nd, err
}

func lookNode() (node, error) {
	var nd node
	l, err := netlink.LinkByName(liveTUN)
	if err == nil {
		nd.tunIndex = l.Attrs().Index
		rs, err := netlink.RouteList(l, netlink.FAMILY_V4)
		if err != nil {
			return nd, err
		}
		nd.routed = destinations(rs)
	} else if !errors.As(err, &netlink.LinkNotFoundError{}) {
		return nd, err
	}
	rs, err := netlink.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{Protocol: gateway.GuardProtocol, Table: unix.RT_TABLE_MAIN},
		netlink.RT_FILTER_PROTOCOL|netlink.RT_FILTER_TABLE)
	if err != nil {
		return nd, err
	}
	nd.guarded = destinations(rs)
	return nd, nil
}

func destinations(rs []netlink.Route) []string {
	var out []string
	for _, r := range rs {
		if r.Dst != nil {
			out = append(out, r.Dst.String())
		}
	}
	slices.Sort(out)
	return out
}

// inNetns is the Dataplane cmd/snorkel runs in the agent's process, a
// gateway.Runner, with every call that touches the network made inside the
// namespace.
type inNetns struct {
	r  *gateway.Runner
	ns *nodeNS
}

func (d inNetns) Apply(ctx context.Context, s *gateway.Spec) error {
	var err error
	d.ns.do(func() { err = d.r.Apply(ctx, s) })
	return err
}

// Status reports nothing: how the Gateway status mirrors the data plane is
// TestAgents' concern.
func (inNetns) Status() []RemoteStatus { return nil }

// wgPeers asks the WireGuard device whose UAPI socket is name, as `wg show`
// does, for its peers: each public key (in hex, as UAPI writes keys) with
// its endpoint.
func wgPeers(name string) (map[string]string, error) {
	c, err := net.Dial("unix", filepath.Join("/var/run/wireguard", name+".sock"))
	if err != nil {
		return nil, err
	}
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(settle)); err != nil {
		return nil, err
	}
	if _, err := fmt.Fprint(c, "get=1\n\n"); err != nil {
		return nil, err
	}
	peers := map[string]string{}
	key := ""
	sc := bufio.NewScanner(c)
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), "=")
		switch k {
		case "public_key":
			key = v
			peers[key] = ""
		case "endpoint":
			peers[key] = v
		case "errno":
			if v != "0" {
				return nil, fmt.Errorf("UAPI get: errno %s", v)
			}
			return peers, nil
		}
	}
	return nil, fmt.Errorf("UAPI get: no errno line (%v)", sc.Err())
}

// fakeRemote is a cluster that exists only as the objects its agent would
// publish on the broker: its gateway at ip on the underlay never answers.
type fakeRemote struct {
	id, ip         string
	key            wireguard.Key
	pods, services []string
}

func newFakeRemote(t *testing.T, id, ip string, pods, services []string) fakeRemote {
	return fakeRemote{id: id, ip: ip, key: publicKey(t), pods: pods, services: services}
}

// publicKey is the public key of a new private key.
func publicKey(t *testing.T) wireguard.Key {
	t.Helper()
	k, err := wireguard.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	return k.Public()
}

func (r fakeRemote) endpoint() *submv1.Endpoint {
	spec := submv1.EndpointSpec{
		ClusterID: r.id, CableName: cableName(r.id, r.ip), Hostname: r.id + "-gw", Subnets: append(slices.Clone(r.pods), r.services...),
		PrivateIP: r.ip, Backend: transport.WireGuard, BackendConfig: map[string]string{BackendConfigPublicKey: r.key.String()},
	}
	return &submv1.Endpoint{ObjectMeta: metav1.ObjectMeta{Name: endpointName(&spec)}, Spec: spec}
}

func (r fakeRemote) cluster() *submv1.Cluster {
	return &submv1.Cluster{ObjectMeta: metav1.ObjectMeta{Name: r.id},
		Spec: submv1.ClusterSpec{ClusterID: r.id, ClusterCIDR: r.pods, ServiceCIDR: r.services, GlobalCIDR: []string{}}}
}

// put creates obj on the broker or replaces the one of its name.
func put[T submv1.Object](t *testing.T, dc dynamic.Interface, ns string, gvr schema.GroupVersionResource, kind string, obj *T) {
	t.Helper()
	u, err := submv1.ToUnstructured(obj, kind)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dc.Resource(gvr).Namespace(ns).Apply(t.Context(), u.GetName(), u, metav1.ApplyOptions{FieldManager: "agent-test", Force: true}); err != nil {
		t.Fatalf("%s %s: %v", kind, u.GetName(), err)
	}
}

func remove(t *testing.T, dc dynamic.Interface, ns string, gvr schema.GroupVersionResource, name string) {
	t.Helper()
	if err := dc.Resource(gvr).Namespace(ns).Delete(t.Context(), name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("%s %s: %v", gvr.Resource, name, err)
	}
}

// TestAgentChangesTheGatewayInPlace runs c1's agent with the gateway that
// cmd/snorkel runs in its process, a gateway.Runner with the WireGuard
// cable driver, in a network namespace of its own, while remote clusters
// come, change and go on the broker. Each change must reach the gateway
// in place: its TUN device keeps its index and c2's counters what they
// counted, while the remotes, their WireGuard peers, the TUN's routes and
// the guard follow the broker.
func TestAgentChangesTheGatewayInPlace(t *testing.T) {
	ns := newNodeNS(t)
	servers := kubetest.Start(t,
		kubelocal.Options{Name: "broker"},
		kubelocal.Options{Name: "c1", ServiceCIDR: "10.88.0.0/16"})
	ctx := t.Context()
	d, err := broker.Deploy(ctx, servers[0].Config(), broker.BrokerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	bns := d.Info.Namespace()
	member, err := broker.Join(ctx, servers[1].Config(), d.Info, broker.JoinOptions{
		ClusterID: "c1", CableDriver: transport.WireGuard, ClusterCIDRs: []string{"10.8.0.0/16"}, ServiceCIDRs: []string{"10.88.0.0/16"},
	})
	if err != nil {
		t.Fatal(err)
	}
	brokerDyn, err := dynamic.NewForConfig(servers[0].Config())
	if err != nil {
		t.Fatal(err)
	}

	keyFile := filepath.Join(t.TempDir(), "wireguard.key")
	_, pub, err := wireguard.LoadOrCreateKey(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	runner := gateway.NewRunner(nil)
	// Registered before the agent's halt, so it runs after it.
	t.Cleanup(func() { ns.do(runner.Close) })
	c1 := start(t, &env{cleanup: t.Cleanup}, servers[1], member, "gw-live", "198.18.0.1", "", func(c *Config) {
		c.Dataplane = inNetns{runner, ns}
		c.BackendConfig = map[string]string{BackendConfigPublicKey: pub.String()}
		c.Gateway = gateway.Spec{
			TUN:       gateway.TUNSpec{Name: liveTUN},
			Transport: gateway.TransportSpec{WireGuard: &gateway.WireGuardSpec{PrivateKeyFile: keyFile, UAPIName: liveUAPI}},
		}
	})
	oneEndpoint(t, brokerDyn, bns, "c1", c1)

	// tunIndex is the TUN device's index once the gateway is up; sent the
	// packets to c2 its counters have counted. A new gateway would have a
	// new device and start counting from zero.
	var tunIndex int
	var sent uint64
	expect := func(step string, rs ...fakeRemote) {
		t.Helper()
		endpoints, peers := map[string]string{}, map[string]string{}
		var cidrs []string
		for _, r := range rs {
			ep := r.ip + ":4500"
			endpoints[r.id] = ep
			peers[fmt.Sprintf("%x", r.key[:])] = ep
			cidrs = append(append(cidrs, r.pods...), r.services...)
		}
		// Join gave c1 a clusterset IP block: the gateway routes and
		// guards the broker's clusterset IP range too.
		cidrs = append(cidrs, broker.DefaultClustersetIPCIDRRange)
		slices.Sort(cidrs)
		eventually(t, settle, step, func() (bool, string) {
			nd, err := ns.look()
			if err != nil {
				t.Fatal(err)
			}
			if tunIndex != 0 && nd.tunIndex != tunIndex {
				t.Fatalf("%s: the TUN device %s has index %d, was %d (0: gone): the change restarted the gateway", step, liveTUN, nd.tunIndex, tunIndex)
			}
			st, ok := runner.Stats()
			if !ok {
				return false, "no gateway runs"
			}
			got := map[string]string{}
			for _, r := range st.Remotes {
				got[r.Cluster] = r.Endpoint
				if r.Cluster == "c2" && r.TxPackets < sent {
					t.Fatalf("%s: c2's counters went back from %d packets to %d: the change restarted the gateway", step, sent, r.TxPackets)
				}
			}
			if !maps.Equal(got, endpoints) {
				return false, fmt.Sprintf("the gateway's remotes %v, want %v", got, endpoints)
			}
			wg, err := wgPeers(liveUAPI)
			if err != nil {
				return false, err.Error()
			}
			if !maps.Equal(wg, peers) {
				return false, fmt.Sprintf("WireGuard peers %v, want %v", wg, peers)
			}
			if !slices.Equal(nd.routed, cidrs) || !slices.Equal(nd.guarded, cidrs) {
				return false, fmt.Sprintf("routed into the TUN %v, guarded %v, want both %v", nd.routed, nd.guarded, cidrs)
			}
			return true, ""
		})
	}

	c2 := newFakeRemote(t, "c2", "198.18.0.21", []string{"10.9.0.0/16"}, []string{"10.99.0.0/16"})
	put(t, brokerDyn, bns, submv1.ClusterResource, "Cluster", c2.cluster())
	put(t, brokerDyn, bns, submv1.EndpointResource, "Endpoint", c2.endpoint())
	expect("c2 connected", c2)
	nd, err := ns.look()
	if err != nil {
		t.Fatal(err)
	}
	tunIndex = nd.tunIndex

	// A packet from the node to c2's pods, which the gateway counts as
	// it hands it to WireGuard (whose handshake goes unanswered).
	ns.do(func() { err = sendUDP("10.9.0.5:9") })
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, settle, "c2's counters count the packet", func() (bool, string) {
		st, _ := runner.Stats()
		for _, r := range st.Remotes {
			if r.Cluster == "c2" && r.TxPackets > 0 {
				sent = r.TxPackets
				return true, ""
			}
		}
		return false, fmt.Sprintf("%+v", st.Remotes)
	})

	c3 := newFakeRemote(t, "c3", "198.18.0.31", []string{"10.7.0.0/16"}, []string{"10.77.0.0/16"})
	put(t, brokerDyn, bns, submv1.ClusterResource, "Cluster", c3.cluster())
	put(t, brokerDyn, bns, submv1.EndpointResource, "Endpoint", c3.endpoint())
	expect("c3 joins", c2, c3)

	c3.key = publicKey(t)
	put(t, brokerDyn, bns, submv1.EndpointResource, "Endpoint", c3.endpoint())
	expect("c3 rekeys", c2, c3)

	// A gateway on another node publishes a new Endpoint, and the old one
	// goes, as at a handover.
	old := c3.endpoint().Name
	c3.ip = "198.18.0.32"
	put(t, brokerDyn, bns, submv1.EndpointResource, "Endpoint", c3.endpoint())
	remove(t, brokerDyn, bns, submv1.EndpointResource, old)
	expect("c3 moves", c2, c3)

	c2.pods = append(c2.pods, "10.19.0.0/16")
	put(t, brokerDyn, bns, submv1.ClusterResource, "Cluster", c2.cluster())
	expect("c2 gains a CIDR", c2, c3)

	remove(t, brokerDyn, bns, submv1.EndpointResource, c3.endpoint().Name)
	remove(t, brokerDyn, bns, submv1.ClusterResource, c3.id)
	expect("c3 leaves", c2)
}

// sendUDP sends one datagram to addr from the current thread's namespace.
func sendUDP(addr string) error {
	c, err := net.Dial("udp4", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	_, err = c.Write([]byte("snorkel"))
	return err
}
