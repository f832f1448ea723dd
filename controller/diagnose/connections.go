package diagnose

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	submv1 "github.com/snorkel-net/snorkel/controller/api/v1"
)

// listGateways reads the Gateway objects the agents keep current.
func (c *cluster) listGateways(ctx context.Context) ([]submv1.Gateway, error) {
	list, err := c.Dynamic.Resource(submv1.GatewayResource).Namespace(c.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing the Gateways in namespace %s: %w", c.Namespace, err)
	}
	out := make([]submv1.Gateway, 0, len(list.Items))
	for i := range list.Items {
		g, err := submv1.FromUnstructured[submv1.Gateway](&list.Items[i])
		if err != nil {
			return nil, err
		}
		out = append(out, *g)
	}
	return out, nil
}

// activeGateway is the Gateway whose agent holds the lease, or nil, with
// a ✗ line saying why there is none.
func activeGateway(ctx context.Context, c *cluster, r *result) *submv1.Gateway {
	gws, err := c.listGateways(ctx)
	if err != nil {
		r.Fail("Cannot read the Gateways: %v", err)
		return nil
	}
	if len(gws) == 0 {
		r.Fail("No Gateway objects in namespace %s: no agent runs on a gateway node; see `snorkel diagnose deployment`", c.Namespace)
		return nil
	}
	for i := range gws {
		if gws[i].Status.HAStatus == submv1.HAStatusActive {
			return &gws[i]
		}
	}
	r.Fail("None of the %d gateways is active: the agents elect one through the Lease snorkel-gateway in %s; see their logs", len(gws), c.Namespace)
	return nil
}

func checkConnections(ctx context.Context, c *cluster, r *result) {
	g := activeGateway(ctx, c, r)
	if g == nil {
		return
	}
	if g.Status.StatusFailure != "" {
		r.Fail("Gateway %q reports a failure: %s", g.Name, g.Status.StatusFailure)
	}
	if len(g.Status.Connections) == 0 {
		r.Fail("There are no connections on gateway %q: no other cluster with cable driver %s has joined the broker, or its gateway publishes no Endpoint; see `snorkel show endpoints` in each cluster",
			g.Name, c.Agent.CableDriver)
		return
	}
	established := 0
	for i := range g.Status.Connections {
		conn := &g.Status.Connections[i]
		ep := &conn.Endpoint
		switch conn.Status {
		case submv1.Connected:
			established++
			r.detail("Connection to cluster %q (%s, %s) is established", ep.ClusterID, ep.Hostname, ep.Backend)
		case submv1.Connecting:
			r.Fail("Connection to cluster %q is in progress: %s: if it stays so, UDP port %d must be open between the gateways both ways (see `snorkel diagnose firewall`)",
				ep.ClusterID, message(conn), c.Agent.Port())
		default:
			r.Fail("Connection to cluster %q is not established: %s: %s", ep.ClusterID, message(conn), connectionFix(conn, c.Agent.Port()))
		}
	}
	if established == len(g.Status.Connections) {
		r.Success("All %d connections of gateway %q are established", established, g.Name)
	}
	if c.probes != nil {
		for _, peer := range c.peers {
			probePath(ctx, c, g, peer, r)
		}
	}
}

func message(conn *submv1.Connection) string {
	if conn.StatusMessage == "" {
		return "no message"
	}
	return fmt.Sprintf("%q", conn.StatusMessage)
}

// connectionFix is what to do about a connection in error.
func connectionFix(conn *submv1.Connection, port int) string {
	ep := &conn.Endpoint
	if conn.UsingIP == "" && ep.PrivateIP == "" && ep.PublicIP == "" {
		return fmt.Sprintf("the Endpoint of cluster %q has no address; check its gateway's --private-ip and --public-ip", ep.ClusterID)
	}
	return fmt.Sprintf("check that both clusters joined with the same broker-info.subm and cable driver (both sides' `snorkel show endpoints`), that UDP port %d is open between the gateways, and the agent's log on both sides", port)
}
