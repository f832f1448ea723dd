package agent

import (
	"net/netip"
	"slices"
	"time"

	"github.com/snorkel-net/snorkel/gateway"
	"github.com/snorkel-net/snorkel/natengine"
	"github.com/snorkel-net/snorkel/transport"
)

// build returns the gateway spec for remotes rs: Config.Gateway with this
// cluster, its transport and Globalnet's global CIDR filled in, and with
// rules (the IPAM's, when not nil) Globalnet's addresses. It shares no
// memory with c or rs, so the Dataplane may keep or change it.
func build(c *Config, rs []gateway.RemoteSpec, rules *natengine.Rules) *gateway.Spec {
	t := c.Gateway
	m := c.Member
	s := &gateway.Spec{
		Cluster: gateway.ClusterSpec{
			ID:           m.ClusterID,
			PodCIDRs:     prefixes(m.ClusterCIDRs),
			ServiceCIDRs: prefixes(m.ServiceCIDRs),
		},
		TUN:            t.TUN,
		UnderlayMTU:    t.UnderlayMTU,
		MetricsAddress: t.MetricsAddress,
		Health:         t.Health,
		Transport:      gateway.TransportSpec{Kind: m.CableDriver, Port: uint16(c.Port)},
	}
	if m.HealthCheckOff {
		off := false
		s.Health.Enabled = &off
	}
	if m.HealthCheckInterval > 0 {
		s.Health.Interval = time.Duration(m.HealthCheckInterval) * time.Second
	}
	if m.HealthCheckMaxPacketLossCount > 0 {
		s.Health.MaxPacketLossCount = m.HealthCheckMaxPacketLossCount
	}
	if !s.TUN.Addr.IsValid() {
		if a, err := netip.ParseAddr(c.HealthCheckIP); err == nil {
			s.TUN.Addr = netip.PrefixFrom(a, a.BitLen())
		}
	}
	switch m.CableDriver {
	case transport.WireGuard:
		if w := t.Transport.WireGuard; w != nil {
			wc := *w
			s.Transport.WireGuard = &wc
		}
	case transport.VXLAN:
		if v := t.Transport.VXLAN; v != nil {
			vc := gateway.VXLANSpec{VNI: v.VNI, MAC: slices.Clone(v.MAC)}
			s.Transport.VXLAN = &vc
		}
	case transport.ESP:
		e := gateway.ESPSpec{}
		if t.Transport.ESP != nil {
			e = *t.Transport.ESP
			e.Proposals, e.IKEProposals = slices.Clone(e.Proposals), slices.Clone(e.IKEProposals)
		}
		// The clusterset's key comes from the broker, as Submariner's
		// gateways take it.
		e.PSK, e.PSKFile = []byte(m.PSK), ""
		s.Transport.ESP = &e
	}
	if m.GlobalCIDR != "" {
		g := gateway.GlobalnetSpec{}
		if t.Globalnet != nil {
			g.Supernet, g.MaxFlows = t.Globalnet.Supernet, t.Globalnet.MaxFlows
		}
		// Every cluster's global CIDR lies in the broker's range, which is
		// the clusterset's supernet unless the gateway settings say.
		if r, err := netip.ParsePrefix(m.GlobalnetCIDRRange); err == nil && !g.Supernet.IsValid() {
			g.Supernet = r
		}
		g.Rules.Global, _ = netip.ParsePrefix(m.GlobalCIDR)
		if rules != nil {
			g.Rules = cloneRules(*rules)
		}
		s.Globalnet = &g
	}
	for _, r := range rs {
		s.Remotes = append(s.Remotes, cloneRemote(r))
	}
	return s
}

func prefixes(ss []string) []netip.Prefix {
	var out []netip.Prefix
	for _, v := range ss {
		if p, err := netip.ParsePrefix(v); err == nil {
			out = append(out, p)
		}
	}
	return out
}

// cloneRules is what the gateway takes of r: the global CIDR and its
// addresses. Pools that hold no pods translate nothing, and are left out.
func cloneRules(r natengine.Rules) natengine.Rules {
	out := natengine.Rules{Global: r.Global, ClusterEgress: slices.Clone(r.ClusterEgress), Ingress: slices.Clone(r.Ingress)}
	for _, p := range r.Pools {
		if len(p.Members) == 0 || len(p.IPs) == 0 {
			continue
		}
		p.Members, p.IPs = slices.Clone(p.Members), slices.Clone(p.IPs)
		out.Pools = append(out.Pools, p)
	}
	return out
}

func cloneRemote(r gateway.RemoteSpec) gateway.RemoteSpec {
	r.PodCIDRs, r.ServiceCIDRs = slices.Clone(r.PodCIDRs), slices.Clone(r.ServiceCIDRs)
	if r.WireGuard != nil {
		w := *r.WireGuard
		r.WireGuard = &w
	}
	if r.VXLAN != nil {
		v := gateway.VXLANRemoteSpec{MAC: slices.Clone(r.VXLAN.MAC)}
		r.VXLAN = &v
	}
	if r.ESP != nil {
		e := *r.ESP
		r.ESP = &e
	}
	return r
}
