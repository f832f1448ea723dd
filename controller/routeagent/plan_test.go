package routeagent

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	submv1 "github.com/snorkel-net/snorkel/controller/api/v1"
	"github.com/snorkel-net/snorkel/gateway"
)

// gw is a Gateway on node name at ip, its status written at second
// written, connected to clusters with these subnets.
func gw(name, ip string, ha submv1.HAStatus, written int, subnets ...[]string) *submv1.Gateway {
	g := &submv1.Gateway{ObjectMeta: metav1.ObjectMeta{Name: name}}
	g.Status.HAStatus = ha
	g.Status.LocalEndpoint = submv1.EndpointSpec{Hostname: name, PrivateIP: ip}
	for i, s := range subnets {
		g.Status.Connections = append(g.Status.Connections, submv1.Connection{Endpoint: submv1.EndpointSpec{ClusterID: "c" + string(rune('2'+i)), Subnets: s}})
	}
	t := metav1.NewTime(time.Unix(int64(written), 0))
	g.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "snorkel", Subresource: "status", Time: &t}}
	return g
}

func prefixes(ss ...string) []netip.Prefix {
	var out []netip.Prefix
	for _, s := range ss {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}

func routesVia(via string, dsts ...string) []route {
	var out []route
	for _, d := range dsts {
		r := route{dst: netip.MustParsePrefix(d)}
		if via != "" {
			r.via = netip.MustParseAddr(via)
		}
		out = append(out, r)
	}
	return out
}

func TestDecide(t *testing.T) {
	const active, passive = submv1.HAStatusActive, submv1.HAStatusPassive
	c2 := []string{"10.2.0.0/16", "10.102.0.0/16"}
	c3 := []string{"10.3.0.0/16"}
	for _, tc := range []struct {
		name       string
		gws        []*submv1.Gateway
		holder     string // of the gateways' Lease
		node       string
		known      []netip.Prefix
		clusterset netip.Prefix
		want       plan
		problems   []string // substrings, one per problem
	}{
		{
			name: "a worker routes every remote CIDR via the active gateway's private IP",
			gws:  []*submv1.Gateway{gw("gw1", "172.18.0.2", active, 1, c2, c3), gw("gw2", "172.18.0.3", passive, 1)},
			node: "worker",
			want: plan{active: "gw1", routes: routesVia("172.18.0.2", "10.2.0.0/16", "10.3.0.0/16", "10.102.0.0/16"),
				bypass: prefixes("10.2.0.0/16", "10.3.0.0/16", "10.102.0.0/16")},
		},
		{
			name:       "with a clusterset IP block, a worker routes and bypasses the clusterset IP range via the active gateway too",
			gws:        []*submv1.Gateway{gw("gw1", "172.18.0.2", active, 1, c3)},
			node:       "worker",
			clusterset: netip.MustParsePrefix("243.0.0.0/8"),
			want: plan{active: "gw1", routes: routesVia("172.18.0.2", "10.3.0.0/16", "243.0.0.0/8"),
				bypass: prefixes("10.3.0.0/16", "243.0.0.0/8")},
		},
		{
			name:       "the clusterset IP range is routed with no remote connected, for VIPs this cluster alone backs",
			gws:        []*submv1.Gateway{gw("gw1", "172.18.0.2", active, 1)},
			node:       "worker",
			clusterset: netip.MustParsePrefix("243.0.0.0/8"),
			want:       plan{active: "gw1", routes: routesVia("172.18.0.2", "243.0.0.0/8"), bypass: prefixes("243.0.0.0/8")},
		},
		{
			name:       "the clusterset IP range is unreachable while no gateway is active",
			gws:        []*submv1.Gateway{gw("gw1", "172.18.0.2", passive, 1)},
			node:       "worker",
			clusterset: netip.MustParsePrefix("243.0.0.0/8"),
			want:       plan{routes: routesVia("", "243.0.0.0/8"), bypass: prefixes("243.0.0.0/8")},
		},
		{
			name:       "the active gateway's node leaves the clusterset IP range to its TUN and bypasses it",
			gws:        []*submv1.Gateway{gw("gw1", "172.18.0.2", active, 1, c3)},
			node:       "gw1",
			clusterset: netip.MustParsePrefix("243.0.0.0/8"),
			want:       plan{active: "gw1", gatewayNode: true, bypass: prefixes("10.3.0.0/16", "243.0.0.0/8")},
		},
		{
			name: "a passive gateway node routes like a worker",
			gws:  []*submv1.Gateway{gw("gw1", "172.18.0.2", active, 1, c3), gw("gw2", "172.18.0.3", passive, 1)},
			node: "gw2",
			want: plan{active: "gw1", routes: routesVia("172.18.0.2", "10.3.0.0/16"), bypass: prefixes("10.3.0.0/16")},
		},
		{
			name: "the active gateway's node has no routes, keeps the bypass and checks forwarding",
			gws:  []*submv1.Gateway{gw("gw1", "172.18.0.2", active, 1, c2)},
			node: "gw1",
			want: plan{active: "gw1", gatewayNode: true, bypass: prefixes("10.2.0.0/16", "10.102.0.0/16")},
		},
		{
			name: "the active gateway's node is known by its endpoint's hostname too",
			gws: func() []*submv1.Gateway {
				g := gw("gw-object", "172.18.0.2", active, 1, c3)
				g.Status.LocalEndpoint.Hostname = "node-a"
				return []*submv1.Gateway{g}
			}(),
			node: "node-a",
			want: plan{active: "gw-object", gatewayNode: true, bypass: prefixes("10.3.0.0/16")},
		},
		{
			name:  "with no active gateway, the CIDRs known are unreachable, the routes already there included",
			gws:   []*submv1.Gateway{gw("gw1", "172.18.0.2", passive, 1, c3)},
			node:  "worker",
			known: prefixes("10.9.0.0/16", "10.3.0.0/16"),
			want:  plan{routes: routesVia("", "10.3.0.0/16", "10.9.0.0/16"), bypass: prefixes("10.3.0.0/16", "10.9.0.0/16")},
		},
		{
			name: "with no Gateway at all and no routes there is nothing to do",
			node: "worker",
			want: plan{},
		},
		{
			name:  "an active gateway's CIDRs replace those of routes that were there",
			gws:   []*submv1.Gateway{gw("gw1", "172.18.0.2", active, 1, c3)},
			node:  "worker",
			known: prefixes("10.9.0.0/16"),
			want:  plan{active: "gw1", routes: routesVia("172.18.0.2", "10.3.0.0/16"), bypass: prefixes("10.3.0.0/16")},
		},
		{
			name:     "of two active gateways the one whose status was written last wins",
			gws:      []*submv1.Gateway{gw("gw1", "172.18.0.2", active, 100, c3), gw("gw2", "172.18.0.3", active, 200, c3)},
			node:     "worker",
			want:     plan{active: "gw2", routes: routesVia("172.18.0.3", "10.3.0.0/16"), bypass: prefixes("10.3.0.0/16")},
			problems: []string{"Gateways gw2, gw1 all claim status.haStatus active and the gateways' Lease names none of them; following gw2"},
		},
		{
			name:     "of two active gateways written at once the first name wins",
			gws:      []*submv1.Gateway{gw("gw2", "172.18.0.3", active, 5, c3), gw("gw1", "172.18.0.2", active, 5, c3)},
			node:     "worker",
			want:     plan{active: "gw1", routes: routesVia("172.18.0.2", "10.3.0.0/16"), bypass: prefixes("10.3.0.0/16")},
			problems: []string{"following gw1"},
		},
		{
			name: "subnets that are not IPv4 CIDRs are left out with a problem; host bits are cleared and duplicates dropped",
			gws:  []*submv1.Gateway{gw("gw1", "172.18.0.2", active, 1, []string{"10.3.1.7/16", "fd00::/64", "bogus"}, c3)},
			node: "worker",
			want: plan{active: "gw1", routes: routesVia("172.18.0.2", "10.3.0.0/16"), bypass: prefixes("10.3.0.0/16")},
			problems: []string{
				`status.connections[0].endpoint.subnets[1] "fd00::/64" (cluster "c2") is not an IPv4 CIDR`,
				`status.connections[0].endpoint.subnets[2] "bogus"`,
			},
		},
		{
			name:   "the Lease's holder is followed over a Gateway that still claims active, as soon as it holds the Lease",
			gws:    []*submv1.Gateway{gw("gw1", "172.18.0.2", active, 2, c3), gw("gw2", "172.18.0.3", active, 1, c2)},
			holder: "gw2",
			node:   "worker",
			want: plan{active: "gw2", routes: routesVia("172.18.0.3", "10.2.0.0/16", "10.102.0.0/16"),
				bypass: prefixes("10.2.0.0/16", "10.102.0.0/16")},
		},
		{
			name:   "a new holder whose status still says passive gets every remote CIDR known, the old gateway's and the node's",
			gws:    []*submv1.Gateway{gw("gw1", "172.18.0.2", active, 2, c3), gw("gw2", "172.18.0.3", passive, 1)},
			holder: "gw2",
			node:   "worker",
			known:  prefixes("10.4.0.0/16"),
			want: plan{active: "gw2", routes: routesVia("172.18.0.3", "10.3.0.0/16", "10.4.0.0/16"),
				bypass: prefixes("10.3.0.0/16", "10.4.0.0/16")},
		},
		{
			name:   "the new holder's node leaves the routes to its TUN",
			gws:    []*submv1.Gateway{gw("gw1", "172.18.0.2", active, 2, c3), gw("gw2", "172.18.0.3", passive, 1)},
			holder: "gw2",
			node:   "gw2",
			want:   plan{active: "gw2", gatewayNode: true, bypass: prefixes("10.3.0.0/16")},
		},
		{
			name:   "a holder without a Gateway is passed over for the Gateway that says active",
			gws:    []*submv1.Gateway{gw("gw1", "172.18.0.2", active, 1, c3)},
			holder: "gw9",
			node:   "worker",
			want:   plan{active: "gw1", routes: routesVia("172.18.0.2", "10.3.0.0/16"), bypass: prefixes("10.3.0.0/16")},
		},
		{
			name:     "an active gateway without a usable private IP makes the remote CIDRs unreachable",
			gws:      []*submv1.Gateway{gw("gw1", "", active, 1, c3)},
			node:     "worker",
			want:     plan{active: "gw1", routes: routesVia("", "10.3.0.0/16"), bypass: prefixes("10.3.0.0/16")},
			problems: []string{`Gateway gw1: status.localEndpoint.private_ip "" is not an IPv4 address`},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := decide(tc.gws, tc.holder, tc.node, tc.known, tc.clusterset)
			problems := got.problems
			got.problems = nil
			if got.active != tc.want.active || got.gatewayNode != tc.want.gatewayNode ||
				!slices.Equal(got.routes, tc.want.routes) || !slices.Equal(got.bypass, tc.want.bypass) {
				t.Errorf("decide:\n got %+v\nwant %+v", got, tc.want)
			}
			if len(problems) != len(tc.problems) {
				t.Fatalf("problems %q, want %d", problems, len(tc.problems))
			}
			for i, want := range tc.problems {
				if !strings.Contains(problems[i], want) {
					t.Errorf("problem %q, want it to say %q", problems[i], want)
				}
			}
		})
	}
}

// TestRouteMetricBetweenTUNAndGuard checks the metric's reason: the
// gateway's TUN routes (metric 0) win over the route agent's, which win
// over the guard's, and the protocols differ.
func TestRouteMetricBetweenTUNAndGuard(t *testing.T) {
	if RouteMetric <= 0 || RouteMetric >= gateway.GuardMetric {
		t.Errorf("RouteMetric %d, want between the TUN's 0 and gateway.GuardMetric %d", RouteMetric, gateway.GuardMetric)
	}
	if RouteProtocol == gateway.GuardProtocol {
		t.Errorf("RouteProtocol %d is the guard's", RouteProtocol)
	}
}
