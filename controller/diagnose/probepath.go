package diagnose

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	submv1 "github.com/snorkel-net/snorkel/controller/api/v1"
	"github.com/snorkel-net/snorkel/controller/broker"
	"github.com/snorkel-net/snorkel/controller/diagnose/netprobe"
)

// Bounds of the path MTU search: IPv4's minimum reassembly size, and the
// largest jumbo frame.
const (
	minPathMTU = 576
	maxPathMTU = 9000
	// tcpHeaders are the IPv4 and TCP headers an MSS leaves out.
	tcpHeaders = 40
)

// remoteServer is peer's whereami server on its active gateway node, for
// the probes that need a pod of the remote cluster; ok false with a ✗
// line when there is none.
func remoteServer(ctx context.Context, c, peer *cluster, r *result) (string, bool) {
	pr := newResult(false)
	pg := activeGateway(ctx, peer, pr)
	if pg == nil {
		for _, n := range pr.Notes() {
			r.Fail("Cluster %q: %s", peer.Agent.ClusterID, n.Text)
		}
		return "", false
	}
	a, err := c.probes.server(ctx, peer, pg.Name)
	if err != nil {
		r.Fail("Cannot start a server pod in cluster %q to probe: %v", peer.Agent.ClusterID, err)
		return "", false
	}
	return a.String(), true
}

// readyNodes lists c's ready nodes by name.
func readyNodes(ctx context.Context, c *cluster) ([]string, error) {
	list, err := c.Kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("cannot list the nodes: %w", err)
	}
	var out []string
	for i := range list.Items {
		if nodeReady(&list.Items[i]) {
			out = append(out, list.Items[i].Name)
		}
	}
	slices.Sort(out)
	return out, nil
}

// probePath measures, from a pod of c on a node other than the gateway's
// when there is one, to a pod of peer: the MSS a TCP connection settles on
// (before any large packet, so that only the gateway's clamp can lower it)
// and the largest ICMP echo with DF set that crosses; and, on the gateway
// node, the MTU of the device the kernel routes that pod through, the
// gateway's TUN device.
func probePath(ctx context.Context, c *cluster, g *submv1.Gateway, peer *cluster, r *result) {
	server, ok := remoteServer(ctx, c, peer, r)
	if !ok {
		return
	}
	nodes, err := readyNodes(ctx, c)
	if err != nil {
		r.Fail("%v", err)
		return
	}
	client := g.Name
	for _, n := range nodes {
		if n != g.Name {
			client = n
			break
		}
	}
	res, err := c.probes.run(ctx, []probePod{
		{c: c, node: g.Name, host: true, args: []string{"lab-pod", "route-mtu", server}},
		{c: c, node: client, raw: true, args: []string{"lab-pod", "path-mtu", server, fmt.Sprintf("--tcp=%s:%d", server, serverPort), fmt.Sprintf("--lo=%d", minPathMTU), fmt.Sprintf("--hi=%d", maxPathMTU)}},
	})
	if err != nil {
		r.Fail("Cannot probe the path to cluster %q: %v", peer.Agent.ClusterID, err)
		return
	}
	var p pathProbe
	p.Peer, p.Gateway, p.Node = peer.Agent.ClusterID, g.Name, client
	if !res[0].ok {
		r.Fail("Cannot read the tunnel's MTU on gateway node %s: %s", g.Name, res[0].line)
		return
	}
	if _, err := fmt.Sscanf(res[0].line, netprobe.RouteLine, &p.Dev, &p.TUNMTU); err != nil {
		r.Fail("Cannot read the tunnel's MTU on gateway node %s: unexpected probe output %q", g.Name, res[0].line)
		return
	}
	if !res[1].ok {
		r.Fail("Cannot probe the path from node %s to a pod of cluster %q: %s", client, peer.Agent.ClusterID, res[1].line)
		return
	}
	if _, err := fmt.Sscanf(res[1].line, netprobe.PathLine, &p.MSS, &p.Largest); err != nil {
		r.Fail("Cannot probe the path from node %s: unexpected probe output %q", client, res[1].line)
		return
	}
	judgePath(r, p)
}

// pathProbe is what probePath measured.
type pathProbe struct {
	Peer, Gateway, Node string
	// Dev and TUNMTU are the device the gateway node routes the remote
	// pod through, and its MTU.
	Dev    string
	TUNMTU int
	// Largest is the largest DF echo that crossed (0: none); MSS the TCP
	// connection's.
	Largest, MSS int
}

// judgePath turns the measures into status lines: the largest packet
// must be the TUN MTU, and the MSS at most what a packet of that size
// carries.
func judgePath(r *result, p pathProbe) {
	bad := false
	if limit := p.TUNMTU - tcpHeaders; p.MSS > limit {
		bad = true
		r.Fail("TCP from node %s to cluster %q settles on an MSS of %d, above the %d that fits the tunnel (%s's MTU %d on gateway node %s, less 40): the gateway's MSS clamp did not apply, and large transfers will stall; see the agent's log on node %s",
			p.Node, p.Peer, p.MSS, limit, p.Dev, p.TUNMTU, p.Gateway, p.Gateway)
	}
	switch {
	case p.Largest == 0:
		bad = true
		r.Fail("No ICMP echo from node %s to a pod of cluster %q came back, even of %d bytes: see `snorkel diagnose firewall` and `snorkel verify`", p.Node, p.Peer, minPathMTU)
	case p.Largest < p.TUNMTU:
		bad = true
		r.Fail("The largest packet with DF set that crosses from node %s to cluster %q is %d bytes, less than the MTU %d of %s on gateway node %s: the network between the gateways carries less than the tunnel needs; raise its MTU by %d bytes, or set the pods' MTU to %d in the CNI's configuration",
			p.Node, p.Peer, p.Largest, p.TUNMTU, p.Dev, p.Gateway, p.TUNMTU-p.Largest, p.Largest)
	case p.Largest > p.TUNMTU:
		bad = true
		r.Warn("Packets of %d bytes with DF set cross from node %s to cluster %q though %s on gateway node %s has MTU %d: that traffic does not go through the gateway's TUN device; check the route agent's routes on node %s (`ip route show proto 84`)",
			p.Largest, p.Node, p.Peer, p.Dev, p.Gateway, p.TUNMTU, p.Node)
	}
	if !bad {
		r.Success("Packets up to %d bytes with DF set cross from node %s to cluster %q, the MTU of %s on gateway node %s, and TCP's MSS is %d (at most %d)",
			p.Largest, p.Node, p.Peer, p.Dev, p.Gateway, p.MSS, p.TUNMTU-tcpHeaders)
	}
}

// probeMasquerade connects from a pod on every ready node of c to a
// server pod of each peer, which reports the source it sees: it must be
// the pod's own address (under Globalnet, one of c's global CIDR), else a
// masquerade rule on that node rewrote it.
func probeMasquerade(ctx context.Context, c *cluster, r *result) {
	expect, in := "their own addresses", "$(POD_IP)"
	if c.Agent.GlobalCIDR != "" {
		expect, in = "addresses of this cluster's global CIDR "+c.Agent.GlobalCIDR, c.Agent.GlobalCIDR
	}
	for _, peer := range c.peers {
		server, ok := remoteServer(ctx, c, peer, r)
		if !ok {
			continue
		}
		nodes, err := readyNodes(ctx, c)
		if err != nil {
			r.Fail("%v", err)
			return
		}
		withAgent, err := routeAgentNodes(ctx, c)
		if err != nil {
			r.Fail("%v", err)
			return
		}
		var pods []probePod
		for _, n := range nodes {
			pods = append(pods, probePod{c: c, node: n, args: []string{"lab-pod", "fetch", fmt.Sprintf("http://%s:%d/", server, serverPort),
				"--expect-cluster=" + peer.Agent.ClusterID, "--expect-client-in=" + in, "--timeout=5s", "--retry-until=" + probeWindow.String()}})
		}
		res, err := c.probes.run(ctx, pods)
		if err != nil {
			r.Fail("Cannot probe cluster %q: %v", peer.Agent.ClusterID, err)
			return
		}
		good := 0
		for i, n := range nodes {
			if judgeMasquerade(r, res[i], masqueradeProbe{Node: n, Peer: peer.Agent.ClusterID, Namespace: c.Namespace, GlobalCIDR: c.Agent.GlobalCIDR, RouteAgent: withAgent[n]}) {
				good++
			}
		}
		if good == len(nodes) {
			r.Success("Pods on all %d nodes reach cluster %q with %s: no masquerade rule rewrites cross-cluster traffic", good, peer.Agent.ClusterID, expect)
		}
	}
}

// masqueradeProbe is one node's masquerade probe, for the verdict's
// words.
type masqueradeProbe struct {
	Node, Peer, Namespace string
	// GlobalCIDR is this cluster's under Globalnet, where the source must
	// lie; empty without.
	GlobalCIDR string
	// RouteAgent: a route agent pod runs on the node.
	RouteAgent bool
}

// judgeMasquerade reports whether the node's pod reached the peer with its
// own address, with a ✗ line naming the node and the fix when not.
func judgeMasquerade(r *result, res podResult, p masqueradeProbe) bool {
	if res.ok {
		r.detail("Pods on node %s reach cluster %q with their own address (%s)", p.Node, p.Peer, res.line)
		return true
	}
	fix := fmt.Sprintf("check the route agent's bypass on node %s (`nft list table ip %s`) and its log there; a CNI rule that masquerades before the route agent's (nat postrouting, priority below 90) rewrites the source first", p.Node, routeAgentTable)
	if !p.RouteAgent {
		fix = fmt.Sprintf("no route agent pod runs on node %s, and the route agent keeps the nftables table ip %s that exempts this traffic from the CNI's masquerade; see `kubectl -n %s get pods -l app=%s -o wide` and the DaemonSet's nodeSelector and tolerations",
			p.Node, routeAgentTable, p.Namespace, broker.RouteAgentDaemonSet)
	}
	if _, seen, ok := strings.Cut(res.line, " saw the client as "); ok {
		seen, _, _ = strings.Cut(seen, ",")
		want := "not its own address"
		if p.GlobalCIDR != "" {
			want = "not an address of this cluster's global CIDR " + p.GlobalCIDR
		}
		r.Fail("A masquerade rule on node %s rewrites cross-cluster traffic: cluster %q saw a pod of node %s as %s, %s: %s", p.Node, p.Peer, p.Node, seen, want, fix)
		return false
	}
	r.Fail("A pod on node %s gets no answer from a pod of cluster %q (%s): a masquerade rule on node %s that gives its traffic the node's address would do that, as the remote gateway drops a source outside this cluster's CIDRs: %s",
		p.Node, p.Peer, res.line, p.Node, fix)
	return false
}

// routeAgentTable is the route agent's nftables table, in its words
// (routeagent.TableName; diagnose does not import the route agent).
const routeAgentTable = "snorkel-routeagent"

// routeAgentNodes are the nodes a pod of the route agent DaemonSet runs
// on.
func routeAgentNodes(ctx context.Context, c *cluster) (map[string]bool, error) {
	ds, err := c.Kube.AppsV1().DaemonSets(c.Namespace).Get(ctx, broker.RouteAgentDaemonSet, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("cannot read the route agent DaemonSet %s/%s: %w", c.Namespace, broker.RouteAgentDaemonSet, err)
	}
	pods, err := c.Kube.CoreV1().Pods(c.Namespace).List(ctx, metav1.ListOptions{LabelSelector: metav1.FormatLabelSelector(ds.Spec.Selector)})
	if err != nil {
		return nil, fmt.Errorf("cannot list the route agent's pods: %w", err)
	}
	on := map[string]bool{}
	for i := range pods.Items {
		if p := &pods.Items[i]; p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
			on[p.Spec.NodeName] = true
		}
	}
	return on, nil
}

// checkRouteAgentCoverage says whether the route agent runs on every
// ready node: without it, a node's pods are masqueraded and have no route
// to the gateway.
func checkRouteAgentCoverage(ctx context.Context, c *cluster, r *result) {
	nodes, err := readyNodes(ctx, c)
	if err != nil {
		r.Fail("%v", err)
		return
	}
	if len(nodes) == 0 {
		return
	}
	on, err := routeAgentNodes(ctx, c)
	if err != nil {
		r.Fail("%v", err)
		return
	}
	var missing []string
	for _, n := range nodes {
		if !on[n] {
			missing = append(missing, n)
		}
	}
	if len(missing) > 0 {
		r.Fail("No route agent pod runs on node %s: pods there have no route to the gateway and the CNI masquerades their cross-cluster traffic; see `kubectl -n %s get pods -l app=%s -o wide` and the DaemonSet %s's nodeSelector and tolerations",
			strings.Join(missing, ", "), c.Namespace, broker.RouteAgentDaemonSet, broker.RouteAgentDaemonSet)
		return
	}
	r.Success("The route agent runs on all %d ready nodes", len(nodes))
}
