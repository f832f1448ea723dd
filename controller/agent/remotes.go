package agent

import (
	"cmp"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strconv"

	"github.com/snorkel-net/snorkel/controller/api"
	submv1 "github.com/snorkel-net/snorkel/controller/api/v1"
	"github.com/snorkel-net/snorkel/gateway"
	"github.com/snorkel-net/snorkel/transport"
	"github.com/snorkel-net/snorkel/transport/wireguard"
)

// peer is another cluster as the broker describes it, and what the agent
// makes of it: a remote of the gateway, or the reason it cannot be one.
type peer struct {
	endpoint submv1.EndpointSpec
	// remote is nil when the cluster cannot be connected; problem says
	// why.
	remote   *gateway.RemoteSpec
	problem  string
	usingIP  string
	usingNAT bool
}

// local is what plan needs to know of this cluster.
type local struct {
	clusterID string
	driver    string
	port      int
	// cidrs are this cluster's ranges that a remote's must not overlap:
	// the pod and service CIDRs, or the global CIDR under Globalnet.
	cidrs     []netip.Prefix
	globalnet bool
	// healthIP is this gateway's health-check address; invalid when it
	// has none, and then it probes nobody.
	healthIP netip.Addr
}

func newLocal(c *Config) local {
	m := c.Member
	l := local{clusterID: m.ClusterID, driver: m.CableDriver, port: c.Port, globalnet: m.GlobalCIDR != ""}
	l.healthIP, _ = netip.ParseAddr(c.HealthCheckIP)
	ranges := append(append([]string(nil), m.ClusterCIDRs...), m.ServiceCIDRs...)
	if l.globalnet {
		ranges = []string{m.GlobalCIDR}
	}
	for _, s := range ranges {
		if p, err := netip.ParsePrefix(s); err == nil {
			l.cidrs = append(l.cidrs, p.Masked())
		}
	}
	return l
}

// plan turns the broker's Endpoints and Clusters into the peers, sorted by
// cluster ID. A cluster with several Endpoints (its gateways handing over)
// is represented by its newest.
func plan(l local, endpoints []*submv1.Endpoint, clusters map[string]*submv1.Cluster) []peer {
	newest := map[string]*submv1.Endpoint{}
	for _, e := range endpoints {
		id := e.Spec.ClusterID
		if id == l.clusterID || id == "" {
			continue
		}
		if cur, ok := newest[id]; !ok || newer(e, cur) {
			newest[id] = e
		}
	}
	ids := slices.Sorted(maps.Keys(newest))
	taken := []owned{{"this cluster", l.cidrs}}
	peers := make([]peer, 0, len(ids))
	for _, id := range ids {
		p := makePeer(l, newest[id], clusters[id])
		if p.remote != nil {
			if msg := overlap(taken, p.remote, l.globalnet); msg != "" {
				p.remote, p.problem = nil, msg
			} else {
				taken = append(taken, owned{fmt.Sprintf("cluster %q", id), remoteCIDRs(p.remote, l.globalnet)})
			}
		}
		peers = append(peers, p)
	}
	return peers
}

func newer(a, b *submv1.Endpoint) bool {
	if c := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); c != 0 {
		return c > 0
	}
	return a.Name > b.Name
}

// makePeer builds the remote for Endpoint e and the cluster's Cluster c,
// which may be nil.
func makePeer(l local, e *submv1.Endpoint, c *submv1.Cluster) peer {
	p := peer{endpoint: e.Spec}
	id := e.Spec.ClusterID
	fail := func(format string, args ...any) peer {
		p.problem = fmt.Sprintf("Endpoint %s of cluster %q: ", e.Name, id) + fmt.Sprintf(format, args...)
		return p
	}
	driver, err := api.NormalizeCableDriver(e.Spec.Backend)
	if err != nil || driver != l.driver {
		return fail("its cable driver is %q and this cluster's is %q; the cable drivers differ, so the clusters cannot connect: join both with the same --cable-driver", e.Spec.Backend, l.driver)
	}

	ip, nat := e.Spec.PublicIP, e.Spec.NATEnabled
	if ip == "" {
		ip, nat = e.Spec.PrivateIP, false
	}
	addr, err := netip.ParseAddr(ip)
	if err != nil {
		return fail("public_ip %q and private_ip %q give no address to reach its gateway at; its gateway must publish one", e.Spec.PublicIP, e.Spec.PrivateIP)
	}
	port := l.port
	if s, ok := e.Spec.BackendConfig[BackendConfigUDPPort]; ok {
		v, err := strconv.ParseUint(s, 10, 16)
		if err != nil || v == 0 {
			return fail("backend_config %q is %q, not a UDP port; its gateway must publish its port (1 to 65535)", BackendConfigUDPPort, s)
		}
		port = int(v)
	}
	// A remote reached at its public address is across a NAT: the
	// gateway keeps the mapping open and follows its rebindings.
	r := &gateway.RemoteSpec{ID: id, Endpoint: netip.AddrPortFrom(addr, uint16(port)), Gateway: e.Spec.Hostname, HealthCheckIP: l.probeAddress(e.Spec.HealthCheckIP), NAT: nat}
	r.CheckedSegments = backendFlag(e.Spec, BackendConfigCheckedSegments)

	var pods, services []string
	globalCIDR := ""
	switch {
	case c != nil:
		pods, services = c.Spec.ClusterCIDR, c.Spec.ServiceCIDR
	case !l.globalnet:
		// Without a Cluster object, the Endpoint's subnets are the pod and
		// service CIDRs together; the gateway routes both alike.
		pods = e.Spec.Subnets
	}
	if l.globalnet {
		switch {
		case c != nil && len(c.Spec.GlobalCIDR) > 0:
			globalCIDR = c.Spec.GlobalCIDR[0]
		case c == nil && len(e.Spec.Subnets) == 1:
			globalCIDR = e.Spec.Subnets[0]
		default:
			return fail("the cluster has no global CIDR, but this cluster uses Globalnet: every cluster of the clusterset must join a broker with Globalnet on")
		}
	} else if len(pods)+len(services) == 0 {
		return fail("neither its Cluster nor its Endpoint lists the cluster's CIDRs; its gateway must publish its subnets")
	}
	parse := func(to *[]netip.Prefix, ss []string) string {
		for _, s := range ss {
			q, err := netip.ParsePrefix(s)
			if err != nil || q != q.Masked() {
				return s
			}
			*to = append(*to, q)
		}
		return ""
	}
	var globals []netip.Prefix
	for _, bad := range []string{parse(&r.PodCIDRs, pods), parse(&r.ServiceCIDRs, services), parse(&globals, slices.DeleteFunc([]string{globalCIDR}, func(s string) bool { return s == "" }))} {
		if bad != "" {
			return fail("%q is not a CIDR with its host bits clear; the cluster must publish its ranges as network addresses, like 10.8.0.0/16", bad)
		}
	}
	if len(globals) == 1 {
		r.GlobalCIDR = globals[0]
	}

	switch l.driver {
	case transport.WireGuard:
		key := e.Spec.BackendConfig[BackendConfigPublicKey]
		if !isWireGuardKey(key) {
			return fail("backend_config %q is %q, not a WireGuard public key; its gateway must publish its key", BackendConfigPublicKey, key)
		}
		k, _ := wireguard.ParseKey(key) // checked by isWireGuardKey
		r.WireGuard = &gateway.WireGuardRemoteSpec{PublicKey: k}
	case transport.ESP:
		r.ESP = &gateway.ESPRemoteSpec{ID: id}
	}
	p.remote, p.usingIP, p.usingNAT = r, addr.String(), nat
	return p
}

// owned are the ranges of one cluster.
type owned struct {
	who   string
	cidrs []netip.Prefix
}

// remoteCIDRs are the ranges the gateway routes to r.
func remoteCIDRs(r *gateway.RemoteSpec, globalnet bool) []netip.Prefix {
	if globalnet {
		return []netip.Prefix{r.GlobalCIDR}
	}
	return append(slices.Clone(r.PodCIDRs), r.ServiceCIDRs...)
}

// overlap says which range of r collides with one already taken, or "".
func overlap(taken []owned, r *gateway.RemoteSpec, globalnet bool) string {
	for _, p := range remoteCIDRs(r, globalnet) {
		for _, o := range taken {
			for _, q := range o.cidrs {
				if !p.Overlaps(q) {
					continue
				}
				if globalnet {
					return fmt.Sprintf("cluster %q: its global CIDR %s overlaps %s of %s; every cluster needs its own global CIDR: make one of them leave and join again", r.ID, p, q, o.who)
				}
				return fmt.Sprintf("cluster %q: its CIDR %s overlaps %s of %s; routing cannot tell them apart: give the clusters distinct CIDRs, or use Globalnet (`snorkel deploy-broker --globalnet`)", r.ID, p, q, o.who)
			}
		}
	}
	return ""
}

// remotes are the peers that can be connected.
func remotes(peers []peer) []gateway.RemoteSpec {
	var out []gateway.RemoteSpec
	for _, p := range peers {
		if p.remote != nil {
			out = append(out, *p.remote)
		}
	}
	slices.SortFunc(out, func(a, b gateway.RemoteSpec) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

// probeAddress is the remote health-check address s if this gateway can
// probe it, else "": this gateway has a health-check address of the same
// IP version, and s is a unicast address outside this cluster's ranges
// (and, without Globalnet, not this gateway's own). A remote without one
// is connected as long as traffic arrives from it.
func (l local) probeAddress(s string) netip.Addr {
	a, err := netip.ParseAddr(s)
	if err != nil || a.Zone() != "" || !l.healthIP.IsValid() || a.Is4() != l.healthIP.Is4() {
		return netip.Addr{}
	}
	if !a.IsGlobalUnicast() || a.IsLinkLocalUnicast() || (!l.globalnet && a == l.healthIP) {
		return netip.Addr{}
	}
	for _, p := range l.cidrs {
		if p.Contains(a) {
			return netip.Addr{}
		}
	}
	return a
}
