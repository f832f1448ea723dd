package routeagent

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	submv1 "github.com/snorkel-net/snorkel/controller/api/v1"
)

const (
	// RouteProtocol tags the route agent's routes (the rtnetlink protocol,
	// `ip route ... proto 84`), as gateway.GuardProtocol (83) tags the
	// gateway's guard, so that every sync, after a restart too, and
	// `snorkel route-agent --uninstall` find exactly the routes it made
	// without keeping any state of its own. Like 83, 84 is neither
	// reserved by the kernel nor used by a routing daemon or CNI we know of.
	RouteProtocol = 84
	// RouteMetric is the metric of the route agent's routes. It lies
	// between the gateway's TUN routes (0) and gateway.GuardMetric (2048):
	// on a gateway node the TUN's routes win while they exist, whatever
	// this agent last saw of the Gateways, and on a passive gateway node,
	// whose guard stays from when it was active, the route to the active
	// gateway wins over the guard.
	RouteMetric = 1024
)

// route is one route the node must have: to a remote CIDR via the active
// gateway's node, or, with no via, unreachable.
type route struct {
	dst netip.Prefix
	via netip.Addr
}

func (r route) String() string {
	if !r.via.IsValid() {
		return "unreachable " + r.dst.String()
	}
	return r.dst.String() + " via " + r.via.String()
}

// plan is what the route agent makes of the Gateways on one node.
type plan struct {
	// active names the active Gateway; "" when none is.
	active string
	// routes are the routes the node must have, sorted by destination:
	// none on the active gateway's node (its TUN routes serve), via the
	// gateway's private IP on every other node, and unreachable routes
	// while no gateway is active, so that pod traffic for a remote cluster
	// never leaves by the default route in cleartext.
	routes []route
	// bypass are the remote CIDRs whose traffic keeps its pod source
	// address past the CNI's masquerade, sorted.
	bypass []netip.Prefix
	// gatewayNode says this node is the active gateway's: it must forward
	// the other nodes' traffic into the TUN device.
	gatewayNode bool
	// problems are what of the Gateways was left out or chosen among,
	// for the log.
	problems []string
}

// decide makes the plan for node from the Gateways of its cluster and the
// holder of the gateways' Lease ("" when none or unknown). known are the
// remote CIDRs last known (the destinations of the routes the agent has,
// and what it last bypassed): with no active gateway they stay,
// unreachable, since only the active gateway's status lists the remotes;
// and while a gateway that has just taken over lists none yet, they are
// routed to it. clusterset is the clusterset IP range when this cluster
// has a clusterset IP block (invalid otherwise): the active gateway serves
// its VIPs, so it is routed and bypassed like a remote CIDR.
func decide(gws []*submv1.Gateway, holder, node string, known []netip.Prefix, clusterset netip.Prefix) plan {
	var p plan
	// everything is what any Gateway or the node knows of the remotes.
	everything := func() []netip.Prefix {
		cidrs := slices.Clone(known)
		for _, g := range gws {
			cidrs = append(cidrs, remoteCIDRs(g, &p)...)
		}
		return cidrs
	}
	gw := activeGateway(gws, holder, &p)
	if gw == nil {
		cidrs := everything()
		if clusterset.IsValid() {
			cidrs = append(cidrs, clusterset.Masked())
		}
		p.bypass = normalize(cidrs)
		for _, c := range p.bypass {
			p.routes = append(p.routes, route{dst: c})
		}
		return p
	}
	p.active = gw.Name
	cidrs := remoteCIDRs(gw, &p)
	if gw.Status.HAStatus != submv1.HAStatusActive {
		// The Lease's new holder has not written its status yet: it
		// takes over the remotes the old one had.
		cidrs = everything()
	}
	if clusterset.IsValid() {
		cidrs = append(cidrs, clusterset.Masked())
	}
	p.bypass = normalize(cidrs)
	if gw.Name == node || (gw.Status.LocalEndpoint.Hostname != "" && gw.Status.LocalEndpoint.Hostname == node) {
		p.gatewayNode = true
		return p
	}
	via, err := netip.ParseAddr(gw.Status.LocalEndpoint.PrivateIP)
	if err != nil || !via.Is4() {
		p.problems = append(p.problems, fmt.Sprintf("Gateway %s: status.localEndpoint.private_ip %q is not an IPv4 address, so this node cannot route to it: the remote CIDRs are unreachable from here until the agent on that node publishes its address",
			gw.Name, gw.Status.LocalEndpoint.PrivateIP))
		via = netip.Addr{}
	}
	for _, c := range p.bypass {
		p.routes = append(p.routes, route{dst: c, via: via})
	}
	return p
}

// activeGateway is the Gateway of the Lease's holder: the gateways elect
// the active one by that Lease, and its holder is active from the moment it
// acquires it, before its status says so. Without a holder, or while the
// holder's Gateway is missing, it is the Gateway whose status says active.
// Two may say so for a while, when an agent ended without writing its
// status; then the one whose status was written last is the live one, and
// the names break a tie so that every node follows the same.
func activeGateway(gws []*submv1.Gateway, holder string, p *plan) *submv1.Gateway {
	if holder != "" {
		if i := slices.IndexFunc(gws, func(g *submv1.Gateway) bool { return g.Name == holder }); i >= 0 {
			return gws[i]
		}
	}
	var active []*submv1.Gateway
	for _, g := range gws {
		if g.Status.HAStatus == submv1.HAStatusActive {
			active = append(active, g)
		}
	}
	if len(active) == 0 {
		return nil
	}
	slices.SortFunc(active, func(a, b *submv1.Gateway) int {
		return cmp.Or(statusWritten(b).Compare(statusWritten(a)), cmp.Compare(a.Name, b.Name))
	})
	if len(active) > 1 {
		names := make([]string, len(active))
		for i, g := range active {
			names[i] = g.Name
		}
		p.problems = append(p.problems, fmt.Sprintf("Gateways %s all claim status.haStatus active and the gateways' Lease names none of them; following %s, whose status was written last",
			strings.Join(names, ", "), active[0].Name))
	}
	return active[0]
}

// statusWritten is when the Gateway's status was last changed, from the
// managed fields the API server keeps for the status subresource.
func statusWritten(g *submv1.Gateway) time.Time {
	var t time.Time
	for _, m := range g.ManagedFields {
		if m.Subresource == "status" && m.Time != nil && m.Time.After(t) {
			t = m.Time.Time
		}
	}
	return t
}

// remoteCIDRs are the subnets of g's connections: each remote cluster's
// pod and service CIDRs, or under Globalnet its global CIDR. What is not an
// IPv4 prefix is left out with a problem: the route agent routes IPv4 only.
func remoteCIDRs(g *submv1.Gateway, p *plan) []netip.Prefix {
	var out []netip.Prefix
	for i, c := range g.Status.Connections {
		for j, s := range c.Endpoint.Subnets {
			pfx, err := netip.ParsePrefix(s)
			if err != nil || !pfx.Addr().Is4() {
				p.problems = append(p.problems, fmt.Sprintf("Gateway %s: status.connections[%d].endpoint.subnets[%d] %q (cluster %q) is not an IPv4 CIDR; the route agent routes IPv4 only, and leaves it out",
					g.Name, i, j, s, c.Endpoint.ClusterID))
				continue
			}
			out = append(out, pfx.Masked())
		}
	}
	return out
}

// normalize sorts prefixes and drops duplicates.
func normalize(ps []netip.Prefix) []netip.Prefix {
	slices.SortFunc(ps, comparePrefix)
	return slices.Compact(ps)
}

func comparePrefix(a, b netip.Prefix) int {
	return cmp.Or(a.Addr().Compare(b.Addr()), cmp.Compare(a.Bits(), b.Bits()))
}
