package nodes

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
)

// The underlay joins every node and control plane of the lab on one L2
// network. APIHost is the underlay namespace's address, where every API
// server listens; HostAddr is the host's own end, from which the CLI and
// kubectl reach them.
var (
	UnderlayCIDR = netip.MustParsePrefix("198.18.0.0/16")
	APIHost      = netip.MustParseAddr("198.18.0.1")
	HostAddr     = netip.MustParseAddr("198.18.0.2")
)

// Broker is the name of the cluster that only runs the broker's API server.
const Broker = "broker"

// ContextPrefix names every kubeconfig context as kind names its clusters'.
const ContextPrefix = "kind-"

// Cluster is one member cluster of the lab.
type Cluster struct {
	Name string
	// Index places the cluster's nodes at 198.18.Index.10 and up.
	Index       int
	PodCIDR     netip.Prefix
	ServiceCIDR netip.Prefix
	// GlobalCIDR is the block join asks for with --globalnet-cidr; empty
	// without Globalnet.
	GlobalCIDR netip.Prefix
	Nodes      []Node
}

// Node is one kubelet node of a cluster.
type Node struct {
	Name    string
	Cluster string
	IP      netip.Addr
	// PodCIDR is the node's slice of the cluster's Pod CIDR, a /24.
	PodCIDR netip.Prefix
	Gateway bool
}

// Context is the cluster's kubeconfig context.
func (c Cluster) Context() string { return ContextPrefix + c.Name }

// DNSIP is the cluster DNS Service's ClusterIP, the tenth address of the
// Service CIDR as kubeadm chooses it.
func (c Cluster) DNSIP() netip.Addr {
	a := c.ServiceCIDR.Masked().Addr()
	for range 10 {
		a = a.Next()
	}
	return a
}

// GatewayNodes are the nodes labelled submariner.io/gateway=true: the
// agent runs on each, and they elect the cluster's active gateway.
func (c Cluster) GatewayNodes() []Node {
	var out []Node
	for _, n := range c.Nodes {
		if n.Gateway {
			out = append(out, n)
		}
	}
	return out
}

// Worker is the cluster's node that is no gateway, where the tutorial's
// client runs.
func (c Cluster) Worker() Node {
	for _, n := range c.Nodes {
		if !n.Gateway {
			return n
		}
	}
	return Node{}
}

// Scenario is a set of clusters the lab brings up together, with a broker.
type Scenario struct {
	Name        string
	Description string
	// GlobalnetRange is deploy-broker's --globalnet-cidr-range; empty
	// without Globalnet.
	GlobalnetRange netip.Prefix
	Clusters       []Cluster
}

// Scenarios are the two parts of the Submariner tutorial, with its CIDRs:
// c1 and c2 with distinct ranges, and g1 and g2 with the same ranges,
// joined through Globalnet.
func Scenarios() []Scenario {
	return []Scenario{
		{
			Name:        "tutorial",
			Description: "c1 and c2, pods 10.8.0.0/16 and 10.9.0.0/16, services 10.88.0.0/16 and 10.99.0.0/16",
			Clusters: []Cluster{
				cluster("c1", 1, "10.8.0.0/16", "10.88.0.0/16", ""),
				cluster("c2", 2, "10.9.0.0/16", "10.99.0.0/16", ""),
			},
		},
		{
			Name:           "globalnet",
			Description:    "g1 and g2, both pods 10.7.0.0/16 and services 10.77.0.0/16, Globalnet range 120.0.0.0/8",
			GlobalnetRange: netip.MustParsePrefix("120.0.0.0/8"),
			Clusters: []Cluster{
				cluster("g1", 3, "10.7.0.0/16", "10.77.0.0/16", "120.1.0.0/24"),
				cluster("g2", 4, "10.7.0.0/16", "10.77.0.0/16", "120.2.0.0/24"),
			},
		},
	}
}

// ScenarioByName finds a scenario of Scenarios.
func ScenarioByName(name string) (Scenario, error) {
	var names []string
	for _, s := range Scenarios() {
		if s.Name == name {
			return s, nil
		}
		names = append(names, s.Name)
	}
	return Scenario{}, fmt.Errorf("no scenario %q; use %s", name, strings.Join(names, " or "))
}

// cluster lays out a cluster of three nodes, each with a /24 of the Pod
// CIDR: two gateway nodes, so that one takes over when the other fails,
// and a worker between them.
func cluster(name string, index int, pods, services, global string) Cluster {
	c := Cluster{
		Name:        name,
		Index:       index,
		PodCIDR:     netip.MustParsePrefix(pods),
		ServiceCIDR: netip.MustParsePrefix(services),
	}
	if global != "" {
		c.GlobalCIDR = netip.MustParsePrefix(global)
	}
	for i, role := range []string{"gateway", "worker", "gateway2"} {
		a := c.PodCIDR.Addr().As4()
		a[2] = byte(i)
		c.Nodes = append(c.Nodes, Node{
			Name:    name + "-" + role,
			Cluster: name,
			IP:      netip.AddrFrom4([4]byte{198, 18, byte(index), byte(10 + i)}),
			PodCIDR: netip.PrefixFrom(netip.AddrFrom4(a), 24),
			Gateway: role != "worker",
		})
	}
	return c
}

// allNodes lists the scenario's nodes, cluster by cluster.
func (s Scenario) allNodes() []Node {
	var out []Node
	for _, c := range s.Clusters {
		out = append(out, c.Nodes...)
	}
	return out
}

// cluster finds one of the scenario's clusters by name.
func (s Scenario) cluster(name string) (Cluster, bool) {
	i := slices.IndexFunc(s.Clusters, func(c Cluster) bool { return c.Name == name })
	if i < 0 {
		return Cluster{}, false
	}
	return s.Clusters[i], true
}
