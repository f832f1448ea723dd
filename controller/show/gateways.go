package show

import (
	"context"
	"fmt"

	submv1 "github.com/snorkel-net/snorkel/controller/api/v1"
)

// readGateways reads the cluster's Gateways for a view, noting in r why
// there are none to show.
func readGateways(ctx context.Context, c *cluster, r *result) []submv1.Gateway {
	gws, err := c.listGateways(ctx)
	switch {
	case err != nil:
		r.Fail("error retrieving gateways: %v", err)
	case len(gws) == 0:
		r.none("no gateways detected: namespace %s has no Gateway objects; is `snorkel agent` running on this cluster's gateway nodes?", c.Namespace)
	}
	return gws
}

// showGateways is `snorkel show gateways`: each gateway's node, whether it
// is the active one, and a summary of its connections or its failure.
func showGateways(ctx context.Context, c *cluster) *result {
	r := &result{}
	gws := readGateways(ctx, c, r)
	if len(gws) == 0 {
		return r
	}
	t := gatewaysTable(gws)
	r.shown, r.body = true, t.write
	return r
}

func gatewaysTable(gws []submv1.Gateway) *table {
	t := &table{columns: []column{{"NODE", 30}, {"HA STATUS", 0}, {"SUMMARY", 0}}}
	for i := range gws {
		st := &gws[i].Status
		t.add(gatewayNode(&gws[i]), string(st.HAStatus), gatewaySummary(st))
	}
	return t
}

// gatewaySummary is the failure the gateway reports, else how many of its
// connections are established, in subctl's words.
func gatewaySummary(st *submv1.GatewayStatus) string {
	connected := 0
	for _, c := range st.Connections {
		if c.Status == submv1.Connected {
			connected++
		}
	}
	switch n := len(st.Connections); {
	case st.StatusFailure != "":
		return st.StatusFailure
	case n == 0:
		return "There are no connections"
	case connected == n:
		return fmt.Sprintf("All connections (%d) are established", n)
	default:
		return fmt.Sprintf("%d connections out of %d are established", connected, n)
	}
}

// showConnections is `snorkel show connections`: every gateway's
// connection to a remote cluster.
func showConnections(ctx context.Context, c *cluster) *result {
	r := &result{}
	gws := readGateways(ctx, c, r)
	if len(gws) == 0 {
		return r
	}
	t := connectionsTable(gws)
	if t.empty() {
		r.none("no connections found: no gateway of this cluster is connected to another cluster; see `snorkel show gateways`")
		return r
	}
	r.shown, r.body = true, t.write
	return r
}

func connectionsTable(gws []submv1.Gateway) *table {
	t := &table{columns: []column{
		{"GATEWAY", 30}, {"CLUSTER", 24}, {"REMOTE IP", 0}, {"NAT", 0},
		{"CABLE DRIVER", 0}, {"SUBNETS", 40}, {"STATUS", 0}, {"RTT avg.", 0},
	}}
	for i := range gws {
		for _, conn := range gws[i].Status.Connections {
			ip, nat := remoteAddress(&conn)
			rtt := ""
			if conn.LatencyRTT != nil {
				rtt = conn.LatencyRTT.Average
			}
			ep := &conn.Endpoint
			t.add(ep.Hostname, ep.ClusterID, ip, nat, ep.Backend, ep.Subnets, string(conn.Status), rtt)
		}
	}
	return t
}

// remoteAddress is the address a connection reaches the remote gateway at
// and whether that crosses NAT: what the gateway reports using, else what
// the remote's Endpoint says.
func remoteAddress(c *submv1.Connection) (string, bool) {
	switch {
	case c.UsingIP != "":
		return c.UsingIP, c.UsingNAT
	case c.Endpoint.NATEnabled:
		return c.Endpoint.PublicIP, true
	}
	return c.Endpoint.PrivateIP, false
}

// showEndpoints is `snorkel show endpoints`: each gateway's own endpoint
// and the remote endpoints it connects to.
func showEndpoints(ctx context.Context, c *cluster) *result {
	r := &result{}
	gws := readGateways(ctx, c, r)
	if len(gws) == 0 {
		return r
	}
	t := endpointsTable(gws)
	r.shown, r.body = true, t.write
	return r
}

func endpointsTable(gws []submv1.Gateway) *table {
	t := &table{columns: []column{{"CLUSTER", 24}, {"ENDPOINT IP", 0}, {"PUBLIC IP", 0}, {"CABLE DRIVER", 0}, {"TYPE", 0}}}
	for i := range gws {
		st := &gws[i].Status
		local := &st.LocalEndpoint
		t.add(local.ClusterID, local.PrivateIP, local.PublicIP, local.Backend, "local")
		for _, conn := range st.Connections {
			ep := &conn.Endpoint
			t.add(ep.ClusterID, ep.PrivateIP, ep.PublicIP, ep.Backend, "remote")
		}
	}
	return t
}
