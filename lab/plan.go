package lab

import (
	"errors"
	"fmt"
	"net/netip"
	"regexp"
	"slices"

	"github.com/snorkel-net/snorkel/gateway"
	"github.com/snorkel-net/snorkel/lab/topo"
)

// UnderlayCIDR is the network between gateways: RFC 2544's benchmarking
// range, which no real network routes.
var UnderlayCIDR = netip.MustParsePrefix("198.18.0.0/15")

// Names of links and of the underlay namespace.
const (
	UnderlayNS     = "underlay"
	UnderlayBridge = "br0"
	// UnderlayLink is a gateway's link to the underlay bridge.
	UnderlayLink = "ul0"
	// PodLink is a pod's only link, to its node.
	PodLink = "eth0"
	// MetricsAddress is where each gateway serves /metrics, inside its
	// own namespace.
	MetricsAddress = "127.0.0.1:9898"
	// DebugAddress is where each gateway serves /status, /flows and, for
	// perf's CPU profiles, /debug/pprof/, inside its own namespace.
	DebugAddress = "127.0.0.1:9899"
)

// Plan is a scenario resolved into namespace names, links and addresses.
// Namespace names in a Plan are short; the topology adds its prefix.
type Plan struct {
	Scenario Scenario
	Prefix   string
	Clusters []ClusterPlan
}

// ClusterPlan is one cluster's part of a Plan.
type ClusterPlan struct {
	Spec     ClusterSpec
	Gateway  GatewayPlan
	Pods     []PodPlan
	Services []ServicePlan
}

// GatewayPlan is a cluster's gateway node.
type GatewayPlan struct {
	NS string
	// BridgePort is the underlay namespace's end of the gateway's link.
	BridgePort string
	UnderlayIP netip.Prefix
	// NodeIP is the node's address toward its pods, the pods' default
	// gateway; it is also the TUN address, so that ICMP errors from the
	// gateway come from an address of the cluster.
	NodeIP netip.Addr
	// TUN names the TUN device and its WireGuard UAPI socket, which lives in
	// a host-global directory: it carries the prefix to stay unique.
	TUN string
}

// GlobalIngressStart is how far into a cluster's global CIDR the lab starts
// allocating ingress IPs: past the network address and the gateway's
// default cluster egress IPs, as Submariner's IPAM allocates them.
const GlobalIngressStart = 1 + gateway.DefaultClusterEgressIPs

// PodPlan is one pod.
type PodPlan struct {
	Name    string
	Cluster string
	NS      string
	IP      netip.Addr
	// NodeLink is the node's end of the pod's veth.
	NodeLink string
	// GlobalIP is the pod's own global IP, set for the pods of headless
	// services with Globalnet.
	GlobalIP netip.Addr
}

// ServicePlan is a service with its backends resolved.
type ServicePlan struct {
	Spec     ServiceSpec
	Backends []PodPlan
	// GlobalIP is a ClusterIP service's global ingress IP with Globalnet.
	GlobalIP netip.Addr
}

// maxNodesPerCIDR is how many clusters may share a pod CIDR: their nodes
// take the addresses below the pods', which start at the eleventh.
const maxNodesPerCIDR = 10

var labelRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

// NewPlan resolves a scenario. It reports every problem it finds.
func NewPlan(s Scenario, prefix string) (*Plan, error) {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if err := topo.ValidPrefix(prefix); err != nil {
		errs = append(errs, err)
	}
	if len(s.Clusters) == 0 {
		bad("scenario %s: no clusters", s.Name)
	}
	if hosts := 1 << (32 - UnderlayCIDR.Bits()); len(s.Clusters) > hosts-2 {
		bad("scenario %s: %d clusters do not fit in the underlay %s", s.Name, len(s.Clusters), UnderlayCIDR)
	}
	p := &Plan{Scenario: s, Prefix: prefix}
	nsNames := map[string]string{UnderlayNS: "the underlay"}
	claim := func(ns, what string) {
		if prev, dup := nsNames[ns]; dup {
			bad("scenario %s: %s and %s would share namespace %q; rename one", s.Name, prev, what, ns)
		}
		nsNames[ns] = what
	}
	ulAddr := UnderlayCIDR.Addr()
	nodesIn := map[netip.Prefix]int{}
	globalnet := len(s.Clusters) > 0 && s.Clusters[0].GlobalCIDR.IsValid()
	for _, c := range s.Clusters {
		field := fmt.Sprintf("cluster %q", c.ID)
		if !labelRE.MatchString(c.ID) || len(c.ID) > 63 {
			bad("%s: the ID is not a DNS-1123 label; use lower-case letters, digits and '-'", field)
		}
		if !c.PodCIDR.IsValid() || !c.PodCIDR.Addr().Is4() || c.PodCIDR != c.PodCIDR.Masked() || c.PodCIDR.Bits() > 24 {
			bad("%s: pod CIDR %s must be an IPv4 network of /24 or larger, without host bits", field, c.PodCIDR)
			continue
		}
		if !c.ServiceCIDR.IsValid() || !c.ServiceCIDR.Addr().Is4() || c.ServiceCIDR != c.ServiceCIDR.Masked() {
			bad("%s: service CIDR %s must be an IPv4 network without host bits", field, c.ServiceCIDR)
		}
		nextGlobal := c.GlobalCIDR.Addr()
		switch {
		case c.GlobalCIDR.IsValid() != globalnet:
			bad("%s: either every cluster of a scenario has a global CIDR or none does", field)
		case globalnet && (!c.GlobalCIDR.Addr().Is4() || c.GlobalCIDR != c.GlobalCIDR.Masked() || c.GlobalCIDR.Bits() > 24):
			bad("%s: global CIDR %s must be an IPv4 network of /24 or larger, without host bits", field, c.GlobalCIDR)
		case globalnet:
			for range GlobalIngressStart {
				nextGlobal = nextGlobal.Next()
			}
		}
		ulAddr = ulAddr.Next()
		// A node address is also its gateway's health-check address, which
		// must be its own across the clusterset: clusters that share a pod
		// CIDR (Globalnet's) take the low addresses in turn.
		node := c.PodCIDR.Addr().Next()
		for range nodesIn[c.PodCIDR] {
			node = node.Next()
		}
		if nodesIn[c.PodCIDR]++; nodesIn[c.PodCIDR] > maxNodesPerCIDR {
			bad("%s: more than %d clusters share the pod CIDR %s; their gateway nodes have no addresses of their own left", field, maxNodesPerCIDR, c.PodCIDR)
		}
		cp := ClusterPlan{Spec: c, Gateway: GatewayPlan{
			NS:         c.ID + "-gw",
			BridgePort: "ul-" + c.ID,
			UnderlayIP: netip.PrefixFrom(ulAddr, UnderlayCIDR.Bits()),
			NodeIP:     node,
			TUN:        prefix + c.ID,
		}}
		claim(cp.Gateway.NS, field+"'s gateway")
		if len(cp.Gateway.TUN) > 15 || len(cp.Gateway.BridgePort) > 15 {
			bad("%s: prefix %q and cluster ID together make the interface name %q longer than 15 characters; shorten one", field, prefix, cp.Gateway.TUN)
		}
		if len(c.Pods) == 0 {
			bad("%s: no pods", field)
		}
		// Pods are numbered from .11 so that the low addresses stay free for
		// nodes, as a CNI keeps its gateway addresses.
		ip := c.PodCIDR.Addr()
		for range 10 {
			ip = ip.Next()
		}
		for _, name := range c.Pods {
			ip = ip.Next()
			pod := PodPlan{Name: name, Cluster: c.ID, NS: name, IP: ip, NodeLink: "v-" + name}
			if !labelRE.MatchString(name) || len(pod.NodeLink) > 15 {
				bad("%s: pod name %q must be a DNS-1123 label of at most 13 characters", field, name)
			}
			if !c.PodCIDR.Contains(ip) {
				bad("%s: %d pods do not fit in %s", field, len(c.Pods), c.PodCIDR)
			}
			claim(name, fmt.Sprintf("pod %q", name))
			cp.Pods = append(cp.Pods, pod)
		}
		headlessOf := map[string]string{}
		for _, svc := range c.Services {
			sf := fmt.Sprintf("%s service %q", field, svc.Name)
			if !labelRE.MatchString(svc.Name) {
				bad("%s: the name is not a DNS-1123 label", sf)
			}
			switch {
			case svc.Headless && svc.ClusterIP.IsValid():
				bad("%s: a headless service has no ClusterIP; remove %s", sf, svc.ClusterIP)
			case !svc.Headless && !c.ServiceCIDR.Contains(svc.ClusterIP):
				bad("%s: ClusterIP %s is outside the service CIDR %s", sf, svc.ClusterIP, c.ServiceCIDR)
			case !svc.Headless && svc.Port == 0:
				bad("%s: the port must be set", sf)
			}
			if svc.TargetPort != WhereamiPort {
				bad("%s: target port %d: lab pods serve only on %d", sf, svc.TargetPort, WhereamiPort)
			}
			if len(svc.Backends) == 0 {
				bad("%s: no backends", sf)
			}
			sp := ServicePlan{Spec: svc}
			if globalnet && !svc.Headless {
				sp.GlobalIP, nextGlobal = nextGlobal, nextGlobal.Next()
			}
			for _, b := range svc.Backends {
				i := slices.IndexFunc(cp.Pods, func(p PodPlan) bool { return p.Name == b })
				if i < 0 {
					bad("%s: backend %q is not a pod of the cluster", sf, b)
					continue
				}
				if svc.Headless {
					if prev, dup := headlessOf[b]; dup {
						bad("%s: pod %q already backs headless service %q; a pod has one global IP", sf, b, prev)
						continue
					}
					headlessOf[b] = svc.Name
					if globalnet {
						cp.Pods[i].GlobalIP, nextGlobal = nextGlobal, nextGlobal.Next()
					}
				}
				sp.Backends = append(sp.Backends, cp.Pods[i])
			}
			if globalnet && !c.GlobalCIDR.Contains(nextGlobal) {
				bad("%s: the global IPs of the services do not fit in %s", field, c.GlobalCIDR)
			}
			cp.Services = append(cp.Services, sp)
		}
		p.Clusters = append(p.Clusters, cp)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("lab: %w", err)
	}
	return p, nil
}

// Globalnet reports whether the plan's clusters are joined by Globalnet.
func (p *Plan) Globalnet() bool {
	return len(p.Clusters) > 0 && p.Clusters[0].Spec.GlobalCIDR.IsValid()
}

// RoutedCIDRs are the ranges another cluster's gateway routes to c: its pod
// and service CIDRs, or with Globalnet its global CIDR.
func (c *ClusterPlan) RoutedCIDRs() []netip.Prefix {
	if c.Spec.GlobalCIDR.IsValid() {
		return []netip.Prefix{c.Spec.GlobalCIDR}
	}
	return []netip.Prefix{c.Spec.PodCIDR, c.Spec.ServiceCIDR}
}

// Cluster returns the plan of cluster id, or nil.
func (p *Plan) Cluster(id string) *ClusterPlan {
	for i := range p.Clusters {
		if p.Clusters[i].Spec.ID == id {
			return &p.Clusters[i]
		}
	}
	return nil
}

// Pod returns the plan of a pod by name.
func (p *Plan) Pod(name string) (PodPlan, bool) {
	for _, c := range p.Clusters {
		for _, pod := range c.Pods {
			if pod.Name == name {
				return pod, true
			}
		}
	}
	return PodPlan{}, false
}

// Remotes returns the clusters other than c, as c's gateway sees them.
func (p *Plan) Remotes(c *ClusterPlan) []*ClusterPlan {
	var out []*ClusterPlan
	for i := range p.Clusters {
		if p.Clusters[i].Spec.ID != c.Spec.ID {
			out = append(out, &p.Clusters[i])
		}
	}
	return out
}

// Namespaces lists every namespace of the plan (short names), in the order
// they are built.
func (p *Plan) Namespaces() []string {
	out := []string{UnderlayNS}
	for _, c := range p.Clusters {
		out = append(out, c.Gateway.NS)
		for _, pod := range c.Pods {
			out = append(out, pod.NS)
		}
	}
	return out
}

// Endpoint is the gateway's tunnel endpoint on the underlay.
func (g GatewayPlan) Endpoint() netip.AddrPort {
	return netip.AddrPortFrom(g.UnderlayIP.Addr(), gateway.DefaultPort)
}
