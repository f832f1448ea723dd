package diagnose

import (
	"context"
	"fmt"
	"net/netip"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"

	submv1 "github.com/snorkel-net/snorkel/controller/api/v1"
	"github.com/snorkel-net/snorkel/controller/diagnose/netprobe"
)

// healthEchoes is how many ICMP echoes probe the health-check path.
const healthEchoes = 5

// probeInterCluster sends marked UDP datagrams from c's active gateway
// node, from its private IP, to peer's gateway at the address and port the
// connection uses, while a sniffer on peer's gateway node watches for them
// past its firewall; and pings peer's health-check IP through the tunnel
// from c's gateway node.
func probeInterCluster(ctx context.Context, c *cluster, g *submv1.Gateway, peer *cluster, r *result) {
	pr := newResult(false)
	pg := activeGateway(ctx, peer, pr)
	if pg == nil {
		for _, n := range pr.Notes() {
			r.Fail("Cluster %q: %s", peer.Agent.ClusterID, n.Text)
		}
		return
	}
	addr, port := pg.Status.LocalEndpoint.PrivateIP, peer.Agent.Port()
	for i := range g.Status.Connections {
		if conn := &g.Status.Connections[i]; conn.Endpoint.ClusterID == peer.Agent.ClusterID {
			addr, _ = remoteAddress(conn)
			port = remotePort(&conn.Endpoint, port)
		}
	}
	src := g.Status.LocalEndpoint.PrivateIP
	dst, err := netip.ParseAddr(addr)
	if err != nil {
		r.Fail("Cluster %q's gateway has no address to probe (%q): see `snorkel show endpoints`", peer.Agent.ClusterID, addr)
		return
	}
	if _, err := netip.ParseAddr(src); err != nil {
		r.Fail("Gateway %q publishes no private IP to probe from (%q): see `snorkel show endpoints`", g.Name, src)
		return
	}
	token := "snorkel-diagnose-" + rand.String(16)
	pods := []probePod{
		{c: peer, node: pg.Name, host: true, args: []string{"lab-pod", "sniff-udp", fmt.Sprintf("--port=%d", port), "--token=" + token, "--timeout=" + probeWindow.String()}},
		{c: c, node: g.Name, host: true, background: true, args: []string{"lab-pod", "send-udp", "--from=" + src, fmt.Sprintf("--to=%s", netip.AddrPortFrom(dst, uint16(port))), "--token=" + token, "--for=" + c.probes.timeout.String()}},
	}
	hc := pg.Status.LocalEndpoint.HealthCheckIP
	switch {
	case c.Agent.HealthCheckOff:
		r.Warn("Health checks are off in this cluster (--health-check=false): the health-check path to cluster %q is not probed", peer.Agent.ClusterID)
	case c.Agent.GlobalCIDR != "":
		r.Warn("Under Globalnet the clusters' health-check IPs may be the same address: the health-check path to cluster %q is not probed from the node (the gateways' own probes: `snorkel show connections`)", peer.Agent.ClusterID)
	case hc == "":
		r.Warn("Cluster %q's gateway publishes no health-check IP (agent --health-check-ip): the health-check path is not probed", peer.Agent.ClusterID)
	default:
		pods = append(pods, probePod{c: c, node: g.Name, host: true, args: []string{"lab-pod", "ping", hc, fmt.Sprintf("--count=%d", healthEchoes)}})
	}
	res, err := c.probes.run(ctx, pods)
	if err != nil {
		r.Fail("Cannot probe cluster %q: %v", peer.Agent.ClusterID, err)
		return
	}
	judgeSniff(r, res[0], tunnelProbe{From: g.Name, Src: src, To: peer.Agent.ClusterID, ToNode: pg.Name, Addr: addr, Port: port})
	if len(res) > 2 {
		judgeHealthPing(r, res[2], g.Name, peer.Agent.ClusterID, hc)
	}
}

// tunnelProbe is what the UDP probe sent, for the verdict's words.
type tunnelProbe struct {
	From, Src, To, ToNode, Addr string
	Port                        int
}

// judgeSniff turns the sniffer pod's outcome into a status line.
func judgeSniff(r *result, res podResult, p tunnelProbe) {
	var seen string
	if res.ok {
		if _, err := fmt.Sscanf(res.line, netprobe.SawLine, &seen); err == nil {
			r.Success("UDP port %d is open: datagrams from gateway node %s (%s) reach cluster %q's gateway node %s at %s:%d (seen from %s)",
				p.Port, p.From, p.Src, p.To, p.ToNode, p.Addr, p.Port, seen)
			return
		}
	}
	if strings.HasPrefix(res.line, "sniff-udp: no datagram") {
		r.Fail("UDP port %d is blocked: datagrams from gateway node %s (%s) to cluster %q's gateway at %s:%d never reached node %s: open UDP port %d from %s to %s in every firewall on the way (the nodes' nftables or iptables, the cloud's security groups)",
			p.Port, p.From, p.Src, p.To, p.Addr, p.Port, p.ToNode, p.Port, p.Src, p.Addr)
		return
	}
	r.Fail("Cannot probe UDP port %d to cluster %q: %s", p.Port, p.To, res.line)
}

// judgeHealthPing turns the health-check ping pod's outcome into a status
// line.
func judgeHealthPing(r *result, res podResult, node, peer, hc string) {
	var got, sent int
	var from string
	if !res.ok {
		r.Fail("Cannot probe the health-check path to cluster %q: %s", peer, res.line)
		return
	}
	if _, err := fmt.Sscanf(res.line, netprobe.RepliesLine, &got, &sent, &from); err != nil {
		r.Fail("Cannot probe the health-check path to cluster %q: unexpected probe output %q", peer, res.line)
		return
	}
	if got == 0 {
		r.Fail("The health-check path is blocked: none of %d ICMP echoes from gateway node %s to cluster %q's health-check IP %s came back through the tunnel: the tunnel must be up (`snorkel diagnose connections`), and cluster %q's gateway node must let ICMP echo in over its TUN device",
			sent, node, peer, hc, peer)
		return
	}
	r.Success("The health-check path is open: %d of %d ICMP echoes from gateway node %s to cluster %q's health-check IP %s came back through the tunnel", got, sent, node, peer, hc)
}

// probeIntraCluster pings the active gateway node's private IP from every
// other node with a TTL of 1: the route agent routes the remote CIDRs via
// that address, which the kernel takes only when it is on a subnet the
// node is directly on, and an echo with TTL 1 is answered only there.
func probeIntraCluster(ctx context.Context, c *cluster, g *submv1.Gateway, r *result) {
	gwIP := g.Status.LocalEndpoint.PrivateIP
	if _, err := netip.ParseAddr(gwIP); err != nil {
		r.Fail("Gateway %q publishes no private IP (%q) for the other nodes to route via: see `snorkel show endpoints`", g.Name, gwIP)
		return
	}
	nodes, err := c.Kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		r.Fail("Cannot list the nodes: %v", err)
		return
	}
	var pods []probePod
	for i := range nodes.Items {
		n := &nodes.Items[i]
		if n.Name == g.Name || !nodeReady(n) {
			continue
		}
		pods = append(pods, probePod{c: c, node: n.Name, host: true, args: []string{"lab-pod", "ping", gwIP, "--ttl=1", "--count=3"}})
	}
	if len(pods) == 0 {
		r.Success("The active gateway node %s is the only ready node: no other node routes through it", g.Name)
		return
	}
	res, err := c.probes.run(ctx, pods)
	if err != nil {
		r.Fail("Cannot probe the nodes: %v", err)
		return
	}
	good := 0
	for i, pp := range pods {
		if judgeAdjacent(r, res[i], pp.node, g.Name, gwIP) {
			good++
		}
	}
	if good == len(pods) {
		r.Success("All %d other nodes reach the active gateway node %s at %s in one hop, as the route agent's routes need", good, g.Name, gwIP)
	}
}

// judgeAdjacent reports whether node reached the gateway node in one hop,
// with a ✗ line when not.
func judgeAdjacent(r *result, res podResult, node, gwNode, gwIP string) bool {
	var got, sent int
	var from string
	if !res.ok {
		r.Fail("Cannot probe from node %s: %s", node, res.line)
		return false
	}
	if _, err := fmt.Sscanf(res.line, netprobe.RepliesLine, &got, &sent, &from); err != nil {
		r.Fail("Cannot probe from node %s: unexpected probe output %q", node, res.line)
		return false
	}
	if got == 0 {
		r.Fail("Node %s does not reach the active gateway node %s at %s in one hop (no ICMP echo with TTL 1 came back): the route agent routes the remote clusters' CIDRs via %s, which the kernel takes only on a subnet the node is directly on; put the nodes on one L2 subnet, and let ICMP and pod traffic between them through the nodes' firewall",
			node, gwNode, gwIP, gwIP)
		return false
	}
	r.detail("Node %s reaches the active gateway node %s at %s in one hop (%d of %d echoes)", node, gwNode, gwIP, got, sent)
	return true
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
