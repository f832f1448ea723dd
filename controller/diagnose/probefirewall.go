package diagnose

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"

	"github.com/snorkel-net/snorkel/controller/agent"
	submv1 "github.com/snorkel-net/snorkel/controller/api/v1"
	"github.com/snorkel-net/snorkel/controller/broker"
	"github.com/snorkel-net/snorkel/controller/diagnose/netprobe"
	"github.com/snorkel-net/snorkel/controller/natdiscovery"
)

// healthEchoes is how many ICMP echoes probe the health-check path.
const healthEchoes = 5

// probeInterCluster probes the path from c's active gateway node to
// peer's. tunnel: marked UDP datagrams from the gateway's private IP to
// peer's gateway at the address and port the connection uses, watched for
// on peer's gateway node past its firewall, and pings of peer's
// health-check IP through the tunnel. natd: the same datagrams to peer's
// NAT discovery port. All the pods run in one batch.
func probeInterCluster(ctx context.Context, c *cluster, g *submv1.Gateway, peer *cluster, tunnel, natd bool, r *result) {
	pr := newResult(false)
	pg := activeGateway(ctx, peer, pr)
	if pg == nil {
		for _, n := range pr.Notes() {
			r.Fail("Cluster %q: %s", peer.Agent.ClusterID, n.Text)
		}
		return
	}
	addr, port := pg.Status.LocalEndpoint.PrivateIP, peer.Agent.Port()
	natdPort := natDiscoveryPort(&pg.Status.LocalEndpoint)
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
	var pods []probePod
	// udp adds a sniffer and a sender for port; the sniffer's result is
	// at the index it returns.
	udp := func(port int) int {
		token := "snorkel-diagnose-" + rand.String(16)
		pods = append(pods,
			probePod{c: peer, node: pg.Name, host: true, args: []string{"lab-pod", "sniff-udp", fmt.Sprintf("--port=%d", port), "--token=" + token, "--timeout=" + probeWindow.String()}},
			probePod{c: c, node: g.Name, host: true, background: true, args: []string{"lab-pod", "send-udp", "--from=" + src, fmt.Sprintf("--to=%s", netip.AddrPortFrom(dst, uint16(port))), "--token=" + token, "--for=" + c.probes.timeout.String()}})
		return len(pods) - 2
	}
	tunnelAt, natdAt, pingAt := -1, -1, -1
	if tunnel {
		tunnelAt = udp(port)
	}
	if natd {
		natdAt = udp(natdPort)
	}
	hc := pg.Status.LocalEndpoint.HealthCheckIP
	switch {
	case !tunnel:
	case c.Agent.HealthCheckOff:
		r.Warn("Health checks are off in this cluster (--health-check=false): the health-check path to cluster %q is not probed", peer.Agent.ClusterID)
	case c.Agent.GlobalCIDR != "":
		r.Warn("Under Globalnet the clusters' health-check IPs may be the same address: the health-check path to cluster %q is not probed from the node (the gateways' own probes: `snorkel show connections`)", peer.Agent.ClusterID)
	case hc == "":
		r.Warn("Cluster %q's gateway publishes no health-check IP (agent --health-check-ip): the health-check path is not probed", peer.Agent.ClusterID)
	default:
		pods = append(pods, probePod{c: c, node: g.Name, host: true, args: []string{"lab-pod", "ping", hc, fmt.Sprintf("--count=%d", healthEchoes)}})
		pingAt = len(pods) - 1
	}
	res, err := c.probes.run(ctx, pods)
	if err != nil {
		r.Fail("Cannot probe cluster %q: %v", peer.Agent.ClusterID, err)
		return
	}
	if tunnelAt >= 0 {
		judgeSniff(r, res[tunnelAt], tunnelProbe{What: "UDP port", From: g.Name, Src: src, To: peer.Agent.ClusterID, ToNode: pg.Name, Addr: addr, Port: port})
	}
	if natdAt >= 0 {
		judgeSniff(r, res[natdAt], tunnelProbe{What: "NAT discovery's UDP port", From: g.Name, Src: src, To: peer.Agent.ClusterID, ToNode: pg.Name, Addr: addr, Port: natdPort})
	}
	if pingAt >= 0 {
		judgeHealthPing(r, res[pingAt], g.Name, peer.Agent.ClusterID, hc)
	}
}

// natDiscoveryPort is the NAT discovery port an Endpoint publishes, else
// the default.
func natDiscoveryPort(ep *submv1.EndpointSpec) int {
	if p, err := strconv.ParseUint(ep.BackendConfig[agent.BackendConfigNATDiscoveryPort], 10, 16); err == nil && p > 0 {
		return int(p)
	}
	return natdiscovery.DefaultPort
}

// tunnelProbe is what the UDP probe sent, for the verdict's words.
type tunnelProbe struct {
	// What names the port in the verdict ("UDP port").
	What                        string
	From, Src, To, ToNode, Addr string
	Port                        int
}

// judgeSniff turns the sniffer pod's outcome into a status line.
func judgeSniff(r *result, res podResult, p tunnelProbe) {
	var seen string
	if res.ok {
		if _, err := fmt.Sscanf(res.line, netprobe.SawLine, &seen); err == nil {
			r.Success("%s %d is open: datagrams from gateway node %s (%s) reach cluster %q's gateway node %s at %s:%d (seen from %s)",
				p.What, p.Port, p.From, p.Src, p.To, p.ToNode, p.Addr, p.Port, seen)
			return
		}
	}
	if strings.HasPrefix(res.line, "sniff-udp: no datagram") {
		r.Fail("%s %d is blocked: datagrams from gateway node %s (%s) to cluster %q's gateway at %s:%d never reached node %s: open UDP port %d from %s to %s in every firewall on the way (the nodes' nftables or iptables, the cloud's security groups)",
			p.What, p.Port, p.From, p.Src, p.To, p.Addr, p.Port, p.ToNode, p.Port, p.Src, p.Addr)
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

// probeIntraCluster probes, from every other ready node, the active
// gateway node. adjacent: pings of its private IP with a TTL of 1 — the
// route agent routes the remote CIDRs via that address, which the kernel
// takes only when it is on a subnet the node is directly on, and an echo
// with TTL 1 is answered only there. metrics: a TCP connection to the
// agent's metrics port there, which Prometheus scrapes from inside the
// cluster.
func probeIntraCluster(ctx context.Context, c *cluster, g *submv1.Gateway, adjacent, metrics bool, r *result) {
	gwIP := g.Status.LocalEndpoint.PrivateIP
	ip, err := netip.ParseAddr(gwIP)
	if err != nil {
		r.Fail("Gateway %q publishes no private IP (%q) for the other nodes to route via: see `snorkel show endpoints`", g.Name, gwIP)
		return
	}
	metricsPort := 0
	if metrics {
		if metricsPort, err = agentMetricsPort(ctx, c); err != nil {
			r.Fail("%v", err)
			metrics = false
		} else if metricsPort == 0 {
			r.Warn("The agent serves no metrics (its --metrics-address is empty): the metrics port is not probed")
			metrics = false
		}
	}
	nodes, err := c.Kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		r.Fail("Cannot list the nodes: %v", err)
		return
	}
	var pods []probePod
	var from []string
	for i := range nodes.Items {
		n := &nodes.Items[i]
		if n.Name == g.Name || !nodeReady(n) {
			continue
		}
		from = append(from, n.Name)
		if adjacent {
			pods = append(pods, probePod{c: c, node: n.Name, host: true, args: []string{"lab-pod", "ping", gwIP, "--ttl=1", "--count=3"}})
		}
		if metrics {
			pods = append(pods, probePod{c: c, node: n.Name, host: true, args: []string{"lab-pod", "tcp-connect", netip.AddrPortFrom(ip, uint16(metricsPort)).String()}})
		}
	}
	if len(from) == 0 {
		r.Success("The active gateway node %s is the only ready node: no other node routes through it or scrapes it", g.Name)
		return
	}
	if len(pods) == 0 {
		return
	}
	res, err := c.probes.run(ctx, pods)
	if err != nil {
		r.Fail("Cannot probe the nodes: %v", err)
		return
	}
	near, scraped := 0, 0
	for i, pp := range pods {
		switch pp.args[1] {
		case "ping":
			if judgeAdjacent(r, res[i], pp.node, g.Name, gwIP) {
				near++
			}
		case "tcp-connect":
			if judgeMetrics(r, res[i], pp.node, g.Name, pp.args[2]) {
				scraped++
			}
		}
	}
	if adjacent && near == len(from) {
		r.Success("All %d other nodes reach the active gateway node %s at %s in one hop, as the route agent's routes need", near, g.Name, gwIP)
	}
	if metrics && scraped == len(from) {
		r.Success("The metrics port is open: all %d other nodes reach the agent's metrics on gateway node %s at %s", scraped, g.Name, netip.AddrPortFrom(ip, uint16(metricsPort)))
	}
}

// judgeMetrics reports whether node connected to the gateway node's
// metrics port, with a ✗ line when not.
func judgeMetrics(r *result, res podResult, node, gwNode, addr string) bool {
	if !res.ok {
		if !strings.HasPrefix(res.line, "tcp-connect:") {
			r.Fail("Cannot probe the metrics port from node %s: %s", node, res.line)
			return false
		}
		_, port, _ := strings.Cut(addr, ":")
		r.Fail("Node %s cannot open a TCP connection to the agent's metrics on gateway node %s at %s (%s): open TCP port %s from the cluster's nodes to the gateway nodes, for Prometheus to scrape the gateways",
			node, gwNode, addr, strings.TrimPrefix(res.line, "tcp-connect: "), port)
		return false
	}
	r.detail("Node %s reaches the agent's metrics on gateway node %s at %s", node, gwNode, addr)
	return true
}

// agentMetricsPort is the port of the agent DaemonSet's
// --metrics-address, 0 when it serves none.
func agentMetricsPort(ctx context.Context, c *cluster) (int, error) {
	ds, err := c.Kube.AppsV1().DaemonSets(c.Namespace).Get(ctx, broker.AgentDaemonSet, metav1.GetOptions{})
	if err != nil {
		return 0, fmt.Errorf("cannot read the agent DaemonSet %s/%s for its metrics port: %w", c.Namespace, broker.AgentDaemonSet, err)
	}
	for _, ctr := range ds.Spec.Template.Spec.Containers {
		for _, a := range ctr.Args {
			v, ok := strings.CutPrefix(a, "--metrics-address=")
			if !ok {
				continue
			}
			if v == "" {
				return 0, nil
			}
			_, p, err := net.SplitHostPort(v)
			if err != nil {
				return 0, fmt.Errorf("the agent DaemonSet %s/%s has --metrics-address=%q, not HOST:PORT: %w", c.Namespace, broker.AgentDaemonSet, v, err)
			}
			n, err := strconv.Atoi(p)
			if err != nil || n <= 0 || n > 65535 {
				return 0, fmt.Errorf("the agent DaemonSet %s/%s has --metrics-address=%q, whose port is not 1-65535", c.Namespace, broker.AgentDaemonSet, v)
			}
			return n, nil
		}
	}
	return agent.DefaultMetricsPort, nil
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
