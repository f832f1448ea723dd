package gateway

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"strconv"
	"strings"

	"github.com/snorkel-net/snorkel/natengine"
	"github.com/snorkel-net/snorkel/packet"
)

// Globalnet defaults, as Submariner sets them.
const (
	DefaultSupernet = "242.0.0.0/8"
	// DefaultClusterEgressIPs is the size of the cluster egress pool
	// (ClusterGlobalEgressIP "cluster-egress.submariner.io").
	DefaultClusterEgressIPs = 8
	// MaxGlobalIPs bounds every counted pool, as Submariner's CRDs do.
	MaxGlobalIPs = 20
)

// Kinds of egress pools and ingress entries, as written in the config.
const (
	PoolKindNamespace      = "namespace"
	PoolKindPodSelector    = "podSelector"
	IngressKindService     = "service"
	IngressKindHeadlessPod = "headlessPod"
)

// linkLocal is never a Globalnet address: Calico routes pods through
// 169.254.1.1, and cloud metadata services live there.
var linkLocal = netip.MustParsePrefix("169.254.0.0/16")

// Globalnet connects clusters whose pod and service CIDRs overlap: each
// cluster gets a global CIDR, its pods leave with global egress IPs, and
// what it exports is reached at global ingress IPs. With it on, remotes are
// routed by their global CIDR and their pod and service CIDRs may overlap
// this cluster's.
type Globalnet struct {
	// Supernet is the range every cluster's global CIDR is cut from;
	// default 242.0.0.0/8.
	Supernet string `json:"supernet,omitempty"`
	// GlobalCIDR is this cluster's part of the global space, e.g.
	// 242.1.0.0/16.
	GlobalCIDR string `json:"globalCIDR"`
	// ClusterEgress are the source addresses of pods no pool claims
	// (Submariner's ClusterGlobalEgressIP); default 8 addresses from the
	// start of GlobalCIDR.
	ClusterEgress GlobalIPs `json:"clusterEgress,omitzero"`
	// EgressPools are GlobalEgressIPs: a namespace's pods, or some of them,
	// leave with their own global IPs.
	EgressPools []EgressPool `json:"egressPools,omitempty"`
	// Ingress are GlobalIngressIPs: the global addresses of exported
	// services and of the pods of exported headless services.
	Ingress []GlobalIngress `json:"ingress,omitempty"`
	// MaxFlows bounds the connection-tracking table; 0 takes the NAT
	// engine's default.
	MaxFlows int `json:"maxFlows,omitempty"`
}

// GlobalIPs are global addresses given either as a list or as a count
// allocated from the global CIDR.
type GlobalIPs struct {
	IPs         []string `json:"ips,omitempty"`
	NumberOfIPs *int     `json:"numberOfIPs,omitempty"`
}

// EgressPool is a GlobalEgressIP resolved to pod addresses.
type EgressPool struct {
	Name string `json:"name"`
	// Kind is "namespace" (a GlobalEgressIP without podSelector) or
	// "podSelector"; a podSelector pool wins over a namespace pool for the
	// pods both hold.
	Kind string `json:"kind"`
	// Members are the pods' addresses or CIDRs, inside cluster.podCIDRs.
	Members []string `json:"members"`
	// IPs or NumberOfIPs (default 1, at most 20) give the pool's global
	// addresses.
	GlobalIPs
}

// GlobalIngress is one GlobalIngressIP.
type GlobalIngress struct {
	Name string `json:"name"`
	// Kind is "service" (LocalIP is a ClusterIP, any port) or "headlessPod"
	// (LocalIP is the pod's address; GlobalIP is then also the pod's source
	// address unless a pool claims the pod).
	Kind     string `json:"kind"`
	GlobalIP string `json:"globalIP"`
	LocalIP  string `json:"localIP"`
}

func (g *Globalnet) applyDefaults() {
	if g.Supernet == "" {
		g.Supernet = DefaultSupernet
	}
	if len(g.ClusterEgress.IPs) == 0 && g.ClusterEgress.NumberOfIPs == nil {
		n := DefaultClusterEgressIPs
		g.ClusterEgress.NumberOfIPs = &n
	}
	for i := range g.EgressPools {
		if p := &g.EgressPools[i]; len(p.IPs) == 0 && p.NumberOfIPs == nil {
			n := 1
			p.NumberOfIPs = &n
		}
	}
}

// SetAllocations replaces g's addresses with those of an IPAM's rules, as
// the agent hands them over: the global CIDR, the cluster egress IPs, the
// egress pools and the ingress entries, every address listed. Pools that
// hold no pods are left out: they translate nothing, and a pool needs
// members.
func (g *Globalnet) SetAllocations(r natengine.Rules) {
	g.GlobalCIDR = r.Global.String()
	g.ClusterEgress = GlobalIPs{IPs: addrStrings(r.ClusterEgress)}
	if len(r.ClusterEgress) == 0 {
		zero := 0
		g.ClusterEgress.NumberOfIPs = &zero
	}
	g.EgressPools = nil
	for _, p := range r.Pools {
		if len(p.Members) == 0 || len(p.IPs) == 0 {
			continue
		}
		kind := PoolKindNamespace
		if p.Kind == natengine.PoolPodSelector {
			kind = PoolKindPodSelector
		}
		members := make([]string, len(p.Members))
		for i, m := range p.Members {
			members[i] = m.String()
		}
		g.EgressPools = append(g.EgressPools, EgressPool{Name: p.Name, Kind: kind, Members: members, GlobalIPs: GlobalIPs{IPs: addrStrings(p.IPs)}})
	}
	g.Ingress = nil
	for _, in := range r.Ingress {
		kind := IngressKindService
		if in.Kind == natengine.IngressHeadlessPod {
			kind = IngressKindHeadlessPod
		}
		g.Ingress = append(g.Ingress, GlobalIngress{Name: in.Name, Kind: kind, GlobalIP: in.Global.String(), LocalIP: in.Local.String()})
	}
}

func addrStrings(as []netip.Addr) []string {
	if len(as) == 0 {
		return nil
	}
	out := make([]string, len(as))
	for i, a := range as {
		out[i] = a.String()
	}
	return out
}

// GlobalnetStatus is the Globalnet part of /status: the addresses the
// config resolved to, counted ones included.
type GlobalnetStatus struct {
	GlobalCIDR       netip.Prefix    `json:"globalCIDR"`
	ClusterEgressIPs []netip.Addr    `json:"clusterEgressIPs"`
	EgressPools      []PoolStatus    `json:"egressPools,omitempty"`
	Ingress          []IngressStatus `json:"ingress,omitempty"`
	// NAT are the engine's counters; nil when another translator stands in
	// for it.
	NAT *NATStatus `json:"nat,omitempty"`
}

// NATStatus are the NAT engine's counters, drops keyed by reason.
type NATStatus struct {
	Flows     int               `json:"flows"`
	Fragments int               `json:"fragments"`
	Created   uint64            `json:"created"`
	Expired   uint64            `json:"expired"`
	Evicted   uint64            `json:"evicted"`
	Retired   uint64            `json:"retired"`
	Drops     map[string]uint64 `json:"drops,omitempty"`
	// Evictions are the flows and pending first fragments removed to make
	// room, by reason.
	Evictions map[string]uint64 `json:"evictions,omitempty"`
}

// FlowStatus is one entry of /flows: a Globalnet flow with both tuples as
// packets carry them on the wire.
type FlowStatus struct {
	// Original is the first packet's tuple as it arrived: from a local pod
	// for an outbound flow, from the remote cluster for an inbound one.
	Original Tuple `json:"original"`
	// Reply is the tuple of the replies as they arrive, before translation.
	Reply Tuple `json:"reply"`
	// Inbound is set for a flow a remote cluster started, through an
	// ingress global IP.
	Inbound bool `json:"inbound"`
	// Protocol is tcp, udp, icmp or ipv6-icmp, or the IP protocol number.
	Protocol string `json:"protocol"`
	// State is the connection-tracking state, e.g. established.
	State       string  `json:"state"`
	AgeSeconds  float64 `json:"ageSeconds"`
	IdleSeconds float64 `json:"idleSeconds"`
	// Rule names what gave the flow its global address: an egress pool,
	// cluster-egress, or an ingress entry.
	Rule string `json:"rule,omitempty"`
}

// Tuple is a packet's source and destination.
type Tuple struct {
	Src netip.AddrPort `json:"src"`
	Dst netip.AddrPort `json:"dst"`
}

func flowStatuses(flows []natengine.Flow) []FlowStatus {
	out := make([]FlowStatus, len(flows))
	for i, f := range flows {
		out[i] = FlowStatus{
			Original:    Tuple(f.Original),
			Reply:       Tuple(f.Reply),
			Inbound:     f.Inbound,
			Protocol:    protocolName(f.Proto),
			State:       f.State.String(),
			AgeSeconds:  f.Age.Seconds(),
			IdleSeconds: f.Idle.Seconds(),
			Rule:        f.Rule,
		}
	}
	return out
}

func protocolName(p uint8) string {
	switch p {
	case packet.ProtoTCP:
		return "tcp"
	case packet.ProtoUDP:
		return "udp"
	case packet.ProtoICMPv4:
		return "icmp"
	case packet.ProtoICMPv6:
		return "ipv6-icmp"
	}
	return strconv.Itoa(int(p))
}

func natStatus(s natengine.Stats) *NATStatus {
	n := &NATStatus{Flows: s.Flows, Fragments: s.Fragments, Created: s.NewFlows, Expired: s.Expired, Evicted: s.Evicted, Retired: s.Retired}
	for r, v := range s.Drops {
		if v > 0 {
			if n.Drops == nil {
				n.Drops = map[string]uint64{}
			}
			n.Drops[natengine.DropReason(r).String()] = v
		}
	}
	for r, v := range s.Evictions {
		if v > 0 {
			if n.Evictions == nil {
				n.Evictions = map[string]uint64{}
			}
			n.Evictions[natengine.EvictReason(r).String()] = v
		}
	}
	return n
}

// PoolStatus is an egress pool with its global IPs.
type PoolStatus struct {
	Name    string         `json:"name"`
	Kind    string         `json:"kind"`
	Members []netip.Prefix `json:"members"`
	IPs     []netip.Addr   `json:"ips"`
}

// IngressStatus is one global ingress IP.
type IngressStatus struct {
	Name     string     `json:"name"`
	Kind     string     `json:"kind"`
	GlobalIP netip.Addr `json:"globalIP"`
	LocalIP  netip.Addr `json:"localIP"`
}

func (gs *globalnetSpec) status() *GlobalnetStatus {
	r := &gs.rules
	st := &GlobalnetStatus{GlobalCIDR: r.Global, ClusterEgressIPs: r.ClusterEgress}
	for _, p := range r.Pools {
		kind := PoolKindNamespace
		if p.Kind == natengine.PoolPodSelector {
			kind = PoolKindPodSelector
		}
		st.EgressPools = append(st.EgressPools, PoolStatus{Name: p.Name, Kind: kind, Members: p.Members, IPs: p.IPs})
	}
	for _, in := range r.Ingress {
		kind := IngressKindService
		if in.Kind == natengine.IngressHeadlessPod {
			kind = IngressKindHeadlessPod
		}
		st.Ingress = append(st.Ingress, IngressStatus{Name: in.Name, Kind: kind, GlobalIP: in.Global, LocalIP: in.Local})
	}
	return st
}

// globalnetSpec is a validated Globalnet section.
type globalnetSpec struct {
	rules    natengine.Rules
	maxFlows int
}

// startNAT runs the Globalnet engine as the gateway's translator. Its clock
// is the gateway's coarse one: the engine reads it per packet.
func (g *Gateway) startNAT() error {
	gs := g.spec.globalnet
	e, err := natengine.New(natengine.Config{
		MaxFlows: gs.maxFlows,
		Rand:     rand.Uint32,
	})
	if err != nil {
		return fmt.Errorf("globalnet: start the NAT engine: %w", err)
	}
	if err := e.SetRules(gs.rules); err != nil {
		return fmt.Errorf("globalnet: rules: %w", err)
	}
	g.xlate = e
	return nil
}

// parseGlobalnet parses the globalnet section into s.Globalnet, allocating
// the counted addresses, and each remote's globalCIDR.
func (c *Config) parseGlobalnet(errs *errList, s *Spec) {
	for i, r := range c.Remotes {
		if r.GlobalCIDR == "" {
			continue
		}
		p, err := netip.ParsePrefix(r.GlobalCIDR)
		if err != nil || !p.Addr().Is4() {
			errs.add(fmt.Sprintf("remotes[%d].globalCIDR", i), "%q is not an IPv4 CIDR; write it like 242.2.0.0/16 (Globalnet is IPv4 only)", r.GlobalCIDR)
			continue
		}
		s.Remotes[i].GlobalCIDR = p
	}
	g := c.Globalnet
	if g == nil {
		return
	}
	supernet, ok := parseGlobalCIDR(errs, "globalnet.supernet", g.Supernet, netip.Prefix{})
	if !ok {
		supernet = netip.Prefix{}
	}
	global, globalOK := parseGlobalCIDR(errs, "globalnet.globalCIDR", g.GlobalCIDR, supernet)
	gs := &GlobalnetSpec{Supernet: supernet, MaxFlows: g.MaxFlows}
	s.Globalnet = gs
	gs.Rules.Global = global
	var podPrefixes, servicePrefixes []netip.Prefix
	for _, p := range s.Cluster.PodCIDRs {
		if p.IsValid() {
			podPrefixes = append(podPrefixes, p)
		}
	}
	for _, p := range s.Cluster.ServiceCIDRs {
		if p.IsValid() {
			servicePrefixes = append(servicePrefixes, p)
		}
	}

	// taken records which field holds each global IP, to name both
	// fields of a duplicate.
	taken := map[netip.Addr]string{}
	take := func(field string, a netip.Addr) {
		if prev, dup := taken[a]; dup {
			errs.add(field, "%s is already %s; every global IP serves one purpose", a, prev)
			return
		}
		taken[a] = field
	}
	parseIP := func(field, v string) (netip.Addr, bool) {
		a, err := netip.ParseAddr(v)
		switch {
		case err != nil || !a.Is4():
			errs.add(field, "%q is not an IPv4 address; write it like 242.1.0.9", v)
			return a, false
		case linkLocal.Contains(a):
			errs.add(field, "%s lies in %s, which Calico uses; choose an address in globalnet.globalCIDR", a, linkLocal)
			return a, false
		case globalOK && !global.Contains(a):
			errs.add(field, "%s is outside globalnet.globalCIDR %s; choose an address inside it", a, global)
			return a, false
		case globalOK && (a == global.Addr() || a == lastAddr(global)):
			errs.add(field, "%s is the network or broadcast address of globalnet.globalCIDR %s; choose another", a, global)
			return a, false
		}
		return a, true
	}
	countOK := func(field string, n *int, min int) bool {
		if n != nil && (*n < min || *n > MaxGlobalIPs) {
			errs.add(field, "%d is out of range; use %d to %d", *n, min, MaxGlobalIPs)
			return false
		}
		return true
	}
	both := func(field string, ips GlobalIPs) bool {
		if len(ips.IPs) > 0 && ips.NumberOfIPs != nil {
			errs.add(field, "both ips and numberOfIPs are set; list the addresses or count them, not both")
			return true
		}
		return false
	}

	// Listed addresses first, so that counted ones are allocated around
	// them.
	if !both("globalnet.clusterEgress", g.ClusterEgress) {
		for i, v := range g.ClusterEgress.IPs {
			f := fmt.Sprintf("globalnet.clusterEgress.ips[%d]", i)
			if a, ok := parseIP(f, v); ok {
				take(f, a)
				gs.Rules.ClusterEgress = append(gs.Rules.ClusterEgress, a)
			}
		}
	}
	pools := make([]natengine.EgressPool, len(g.EgressPools))
	names := map[string]string{}
	for i, p := range g.EgressPools {
		f := fmt.Sprintf("globalnet.egressPools[%d]", i)
		pools[i].Name = p.Name
		checkName(errs, f+".name", p.Name, names)
		switch p.Kind {
		case PoolKindNamespace:
			pools[i].Kind = natengine.PoolNamespace
		case PoolKindPodSelector:
			pools[i].Kind = natengine.PoolPodSelector
		default:
			errs.add(f+".kind", "%q is not a pool kind; use %s or %s", p.Kind, PoolKindNamespace, PoolKindPodSelector)
		}
		if len(p.Members) == 0 {
			errs.add(f+".members", "pool %q has no members; list its pods' addresses", p.Name)
		}
		for j, v := range p.Members {
			mf := fmt.Sprintf("%s.members[%d]", f, j)
			m, err := parseHostOrPrefix(v)
			switch {
			case err != nil || !m.Addr().Is4():
				errs.add(mf, "%q is not an IPv4 address or CIDR; write it like 10.7.0.11 or 10.7.1.0/24", v)
			case m != m.Masked():
				errs.add(mf, "%q has host bits set; did you mean %s?", v, m.Masked())
			case !coversPrefix(podPrefixes, m):
				errs.add(mf, "%s is not inside cluster.podCIDRs; a pool's members are this cluster's pods", m)
			default:
				pools[i].Members = append(pools[i].Members, m)
			}
		}
		if !both(f, p.GlobalIPs) {
			for j, v := range p.IPs {
				ipf := fmt.Sprintf("%s.ips[%d]", f, j)
				if a, ok := parseIP(ipf, v); ok {
					take(ipf, a)
					pools[i].IPs = append(pools[i].IPs, a)
				}
			}
		}
	}
	for i, a := range pools {
		for j := i + 1; j < len(pools); j++ {
			b := pools[j]
			if a.Kind != b.Kind {
				// A podSelector pool picks some pods of a namespace pool:
				// the overlap is the precedence Submariner defines.
				continue
			}
			for _, ma := range a.Members {
				for _, mb := range b.Members {
					if ma.Overlaps(mb) {
						errs.add(fmt.Sprintf("globalnet.egressPools[%d].members", j), "%s overlaps %s of pool %q of the same kind; a pod belongs to one %s pool", mb, ma, a.Name, g.EgressPools[j].Kind)
					}
				}
			}
		}
	}
	ingressNames := map[string]string{}
	locals := map[netip.Addr]string{}
	for i, in := range g.Ingress {
		f := fmt.Sprintf("globalnet.ingress[%d]", i)
		checkName(errs, f+".name", in.Name, ingressNames)
		e := natengine.Ingress{Name: in.Name}
		var within []netip.Prefix
		var where string
		switch in.Kind {
		case IngressKindService:
			e.Kind, within, where = natengine.IngressService, servicePrefixes, "cluster.serviceCIDRs (a ClusterIP)"
		case IngressKindHeadlessPod:
			e.Kind, within, where = natengine.IngressHeadlessPod, podPrefixes, "cluster.podCIDRs (the pod's address)"
		default:
			errs.add(f+".kind", "%q is not an ingress kind; use %s or %s", in.Kind, IngressKindService, IngressKindHeadlessPod)
		}
		if a, ok := parseIP(f+".globalIP", in.GlobalIP); ok {
			take(f+".globalIP", a)
			e.Global = a
		}
		l, err := netip.ParseAddr(in.LocalIP)
		switch {
		case err != nil || !l.Is4():
			errs.add(f+".localIP", "%q is not an IPv4 address; write the ClusterIP or pod IP, like 10.77.0.10", in.LocalIP)
		case e.Kind != 0 && !covers(within, l):
			errs.add(f+".localIP", "%s is not inside %s", l, where)
		default:
			if prev, dup := locals[l]; dup {
				errs.add(f+".localIP", "%s is already the local address of %s; give each exported address one global IP", l, prev)
			}
			locals[l] = f
			e.Local = l
		}
		gs.Rules.Ingress = append(gs.Rules.Ingress, e)
	}

	// Counted addresses come from the allocator the controller's IPAM
	// uses, around the listed ones: the cluster egress IPs first, then
	// each counted pool in the order listed.
	if globalOK {
		pool := natengine.NewAddrPool(global)
		for a := range taken {
			// Each listed address was checked above; a pool refuses none.
			_ = pool.Reserve([]netip.Addr{a})
		}
		count := func(field string, n int, what string) []netip.Addr {
			ips, err := pool.Allocate(n)
			if err != nil {
				errs.add(field, "%d addresses for %s do not fit in globalnet.globalCIDR %s (%v); use a larger global CIDR or fewer IPs", n, what, global, err)
			}
			return ips
		}
		if n := g.ClusterEgress.NumberOfIPs; countOK("globalnet.clusterEgress.numberOfIPs", n, 0) && len(g.ClusterEgress.IPs) == 0 && n != nil && *n > 0 {
			gs.Rules.ClusterEgress = count("globalnet.clusterEgress.numberOfIPs", *n, "the cluster egress")
		}
		for i, p := range g.EgressPools {
			f := fmt.Sprintf("globalnet.egressPools[%d].numberOfIPs", i)
			if !countOK(f, p.NumberOfIPs, 1) || len(p.IPs) > 0 || p.NumberOfIPs == nil {
				continue
			}
			pools[i].IPs = count(f, *p.NumberOfIPs, fmt.Sprintf("pool %q", p.Name))
		}
	}
	gs.Rules.Pools = pools
}

// deriveGlobalnet checks the remotes' global CIDRs against this cluster's
// and each other, routes each remote by its global CIDR, and completes the
// NAT engine's rules with the local and remote ranges.
func (s *Spec) deriveGlobalnet(errs *errList, d *spec) {
	g := s.Globalnet
	if g == nil {
		for i, r := range s.Remotes {
			if r.GlobalCIDR.IsValid() {
				errs.add(fmt.Sprintf("remotes[%d].globalCIDR", i), "is set but Globalnet is off; add a globalnet section with this cluster's globalCIDR, or remove it")
			}
		}
		return
	}
	if g.MaxFlows < 0 {
		errs.add("globalnet.maxFlows", "%d is negative; give the table size, or 0 for the default", g.MaxFlows)
	}
	global, globalOK := checkGlobalCIDR(errs, "globalnet.globalCIDR", g.Rules.Global, g.Supernet)
	gs := &globalnetSpec{rules: g.Rules, maxFlows: g.MaxFlows}
	gs.rules.Remotes = nil
	type owned struct {
		field string
		p     netip.Prefix
	}
	var globals []owned
	if globalOK {
		globals = append(globals, owned{"globalnet.globalCIDR", global})
	}
	for i := range s.Remotes {
		f := fmt.Sprintf("remotes[%d].globalCIDR", i)
		r := &d.remotes[i]
		r.cidrs = nil
		if !s.Remotes[i].GlobalCIDR.IsValid() {
			errs.add(f, "remote %q has no globalCIDR; with Globalnet on every remote needs one (its globalnet.globalCIDR), e.g. 242.2.0.0/16", s.Remotes[i].ID)
			continue
		}
		p, ok := checkGlobalCIDR(errs, f, s.Remotes[i].GlobalCIDR, g.Supernet)
		if !ok {
			continue
		}
		r.cidrs = []netip.Prefix{p}
		globals = append(globals, owned{f, p})
	}
	for i, a := range globals {
		for _, b := range globals[i+1:] {
			if a.p.Overlaps(b.p) {
				errs.add(b.field, "%s overlaps %s %s; every cluster needs its own global CIDR (a /16 of %s each)", b.p, a.field, a.p, supernetOr(g.Supernet))
			}
		}
		for _, l := range d.local {
			if a.p.Overlaps(l) {
				errs.add(a.field, "%s overlaps this cluster's own CIDR %s; choose a global CIDR outside the pod and service CIDRs", a.p, l)
			}
		}
	}

	gs.rules.Local = append([]netip.Prefix(nil), d.local...)
	// ICMP errors from the gateway node itself (TTL exceeded, fragmentation
	// needed on the way to a pod) leave from the TUN address: it must be a
	// source Egress translates, or the remote drops them as spoofed.
	if a := d.tunAddr.Addr(); d.tunAddr.IsValid() && a.Is4() && !covers(d.local, a) {
		gs.rules.Local = append(gs.rules.Local, netip.PrefixFrom(a, 32))
	}
	for _, r := range d.remotes {
		var p netip.Prefix
		if len(r.cidrs) == 1 {
			p = r.cidrs[0]
		}
		gs.rules.Remotes = append(gs.rules.Remotes, p)
	}
	d.globalnet = gs
}

// checkGlobalCIDR checks a global CIDR: IPv4, no host bits, clear of
// 169.254.0.0/16, and inside supernet when supernet is valid.
func checkGlobalCIDR(errs *errList, field string, p, supernet netip.Prefix) (netip.Prefix, bool) {
	switch {
	case !p.IsValid():
		errs.add(field, "is required with Globalnet; give a /16 of %s, e.g. 242.1.0.0/16", supernetOr(supernet))
	case !p.Addr().Is4():
		errs.add(field, "%q is not an IPv4 CIDR; write it like 242.1.0.0/16 (Globalnet is IPv4 only)", p)
	case p != p.Masked():
		errs.add(field, "%q has host bits set; did you mean %s?", p, p.Masked())
	case p.Overlaps(linkLocal):
		errs.add(field, "%s overlaps %s, which Calico uses; choose a range in %s", p, linkLocal, supernetOr(supernet))
	case p.Bits() > 30:
		errs.add(field, "%s is too small for global IPs; use a /30 or larger (a /16 is usual)", p)
	case supernet.IsValid() && !(supernet.Contains(p.Addr()) && p.Bits() >= supernet.Bits()):
		errs.add(field, "%s is outside globalnet.supernet %s; choose a range inside it, or set globalnet.supernet to the range all clusters share", p, supernet)
	default:
		return p, true
	}
	return p, false
}

// parseGlobalCIDR parses a global CIDR and checks it as checkGlobalCIDR
// does.
func parseGlobalCIDR(errs *errList, field, v string, supernet netip.Prefix) (netip.Prefix, bool) {
	if v == "" {
		return checkGlobalCIDR(errs, field, netip.Prefix{}, supernet)
	}
	p, err := netip.ParsePrefix(v)
	if err != nil || !p.Addr().Is4() {
		errs.add(field, "%q is not an IPv4 CIDR; write it like 242.1.0.0/16 (Globalnet is IPv4 only)", v)
		return p, false
	}
	return checkGlobalCIDR(errs, field, p, supernet)
}

func supernetOr(p netip.Prefix) string {
	if p.IsValid() {
		return p.String()
	}
	return DefaultSupernet
}

func checkName(errs *errList, field, name string, seen map[string]string) {
	switch {
	case name == "":
		errs.add(field, "is required; name the entry (e.g. after its Kubernetes object)")
	case seen[name] != "":
		errs.add(field, "%q is already the name of %s; names must be unique", name, seen[name])
	default:
		seen[name] = strings.TrimSuffix(field, ".name")
	}
}

func covers(ps []netip.Prefix, a netip.Addr) bool {
	for _, p := range ps {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

func coversPrefix(ps []netip.Prefix, q netip.Prefix) bool {
	for _, p := range ps {
		if p.Bits() <= q.Bits() && p.Contains(q.Addr()) {
			return true
		}
	}
	return false
}

// lastAddr is the highest address of an IPv4 prefix.
func lastAddr(p netip.Prefix) netip.Addr {
	a := p.Masked().Addr().As4()
	host := uint32(1)<<(32-p.Bits()) - 1
	v := uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3]) | host
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}
