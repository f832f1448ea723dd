package diagnose

import (
	"context"
	"fmt"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/snorkel-net/snorkel/controller/agent"
	submv1 "github.com/snorkel-net/snorkel/controller/api/v1"
	"github.com/snorkel-net/snorkel/controller/broker"
)

// checkFirewall tells whether the tunnel port and the health-check path
// are open between this cluster's active gateway and each remote one, and
// whether the other nodes reach the gateway node as the route agent needs.
// With probes it sends packets (probeInterCluster, probeIntraCluster);
// without, or with no remote cluster to probe, it reads what the gateways
// saw (firewallFromStatus). It needs the gateway pods running; on a
// cluster whose agents do not run it says so and checks nothing.
func checkFirewall(ctx context.Context, c *cluster, r *result) {
	running, err := runningAgents(ctx, c)
	if err != nil {
		r.Fail("%v", err)
		return
	}
	if running == 0 {
		r.Warn("Skipped: needs running gateway pods, and no pod of the agent DaemonSet %s/%s runs; see `snorkel diagnose deployment`", c.Namespace, broker.AgentDaemonSet)
		return
	}
	g := activeGateway(ctx, c, r)
	if g == nil {
		return
	}
	if c.probes == nil {
		firewallFromStatus(c, g, r)
		return
	}
	part := func(p string) bool { return c.firewall == "" || c.firewall == p }
	if part(FirewallIntra) || part(FirewallMetrics) {
		probeIntraCluster(ctx, c, g, part(FirewallIntra), part(FirewallMetrics), r)
	}
	if !part(FirewallInter) && !part(FirewallNATDiscovery) {
		return
	}
	if len(c.peers) == 0 {
		r.Warn("No remote cluster to probe: give its context as well (--remotecontext, or --contexts with both); meanwhile, what the gateways reported:")
		firewallFromStatus(c, g, r)
		return
	}
	for _, peer := range c.peers {
		probeInterCluster(ctx, c, g, peer, part(FirewallInter), part(FirewallNATDiscovery), r)
	}
}

// firewallFromStatus judges the firewall from what the gateways saw: a
// connection that is up has carried tunnel packets both ways over the UDP
// port, and its round-trip times are the health-check probes (ICMP echo
// between the gateways' health-check IPs, inside the tunnel) answered.
func firewallFromStatus(c *cluster, g *submv1.Gateway, r *result) {
	open := 0
	for i := range g.Status.Connections {
		conn := &g.Status.Connections[i]
		ep := &conn.Endpoint
		addr, _ := remoteAddress(conn)
		port := remotePort(ep, c.Agent.Port())
		switch {
		case conn.Status != submv1.Connected:
			r.Fail("No tunnel traffic with cluster %q at %s: open UDP port %d both ways between the gateways (to %s:%d, and from it to this gateway's port %d), in the nodes' firewalls and the cloud's security groups",
				ep.ClusterID, addr, port, addr, port, c.Agent.Port())
		case c.Agent.HealthCheckOff:
			open++
			r.Warn("UDP port %d to cluster %q at %s carries the tunnel; health checks are off in this cluster (--health-check=false), so the health-check path is not tested", port, ep.ClusterID, addr)
		case ep.HealthCheckIP == "":
			open++
			r.Warn("UDP port %d to cluster %q at %s carries the tunnel; its gateway publishes no health-check IP (agent --health-check-ip), so the health-check path is not tested", port, ep.ClusterID, addr)
		case conn.LatencyRTT == nil || conn.LatencyRTT.Last == "":
			r.Fail("The tunnel to cluster %q is up, but no health-check probe to %s came back: the remote's firewall must let ICMP echo from this cluster's health-check IP in over the tunnel device",
				ep.ClusterID, ep.HealthCheckIP)
		default:
			open++
			r.detail("UDP port %d to cluster %q at %s is open both ways, and health-check probes to %s come back (RTT %s)", port, ep.ClusterID, addr, ep.HealthCheckIP, conn.LatencyRTT.Last)
		}
	}
	if open == len(g.Status.Connections) {
		r.Success("The tunnel port is open to all %d remote gateways", open)
	}
}

// runningAgents counts the agent DaemonSet's running pods.
func runningAgents(ctx context.Context, c *cluster) (int, error) {
	ds, err := c.Kube.AppsV1().DaemonSets(c.Namespace).Get(ctx, broker.AgentDaemonSet, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("cannot read the agent DaemonSet %s/%s: %w", c.Namespace, broker.AgentDaemonSet, err)
	}
	pods, err := c.Kube.CoreV1().Pods(c.Namespace).List(ctx, metav1.ListOptions{LabelSelector: metav1.FormatLabelSelector(ds.Spec.Selector)})
	if err != nil {
		return 0, fmt.Errorf("cannot list the agent's pods: %w", err)
	}
	n := 0
	for i := range pods.Items {
		if pods.Items[i].Status.Phase == corev1.PodRunning {
			n++
		}
	}
	return n, nil
}

// remoteAddress is the address a connection reaches the remote gateway at
// and whether that crosses NAT.
func remoteAddress(conn *submv1.Connection) (string, bool) {
	switch {
	case conn.UsingIP != "":
		return conn.UsingIP, conn.UsingNAT
	case conn.Endpoint.NATEnabled:
		return conn.Endpoint.PublicIP, true
	}
	return conn.Endpoint.PrivateIP, false
}

// remotePort is the UDP port the remote gateway publishes in its
// Endpoint, or def when it publishes none.
func remotePort(ep *submv1.EndpointSpec, def int) int {
	if p, err := strconv.Atoi(ep.BackendConfig[agent.BackendConfigUDPPort]); err == nil && p > 0 {
		return p
	}
	return def
}
