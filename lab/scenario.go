package lab

import (
	"fmt"
	"net/netip"
	"sort"
	"strings"
)

// Scenario is what the lab builds: clusters, their pods and services. It is
// plain data so that another scenario (Globalnet's clusters with overlapping
// CIDRs, more clusters on the same underlay) is a new value, not new code.
type Scenario struct {
	Name        string        `json:"name"`
	Description string        `json:"description,omitempty"`
	Clusters    []ClusterSpec `json:"clusters"`
}

// ClusterSpec is one cluster of a scenario.
type ClusterSpec struct {
	// ID is the cluster ID (a DNS-1123 label), also the gateway node's
	// namespace name stem.
	ID          string       `json:"id"`
	PodCIDR     netip.Prefix `json:"podCIDR"`
	ServiceCIDR netip.Prefix `json:"serviceCIDR"`
	// Pods names the pod namespaces; every pod runs the whereami server on
	// port 80. Names are unique across the scenario and at most 13
	// characters, since the node's end of a pod's veth is named "v-"+name.
	Pods     []string      `json:"pods"`
	Services []ServiceSpec `json:"services,omitempty"`
	// GlobalCIDR, when set, puts the cluster on Globalnet: its gateway
	// translates to and from this range, and every service of the cluster
	// is exported with global IPs. Either every cluster of a scenario has
	// one or none does.
	GlobalCIDR netip.Prefix `json:"globalCIDR,omitzero"`
}

// ServiceSpec is a TCP ClusterIP service, or a headless service.
type ServiceSpec struct {
	Name string `json:"name"`
	// ClusterIP is unset for a headless service.
	ClusterIP netip.Addr `json:"clusterIP,omitzero"`
	Port      uint16     `json:"port,omitempty"`
	// TargetPort is the port the backends listen on.
	TargetPort uint16 `json:"targetPort"`
	// Backends names pods of the same cluster.
	Backends []string `json:"backends"`
	// Headless services have no ClusterIP and no load-balancing: clients
	// reach each backend at its own address (with Globalnet, at the pod's
	// own global IP, which is also the pod's source address).
	Headless bool `json:"headless,omitempty"`
}

// WhereamiPort is the port every pod serves whereami on.
const WhereamiPort = 80

// Basic is the Submariner tutorial's topology: c1 with two pods, and c2 with
// three web pods behind the ClusterIP service web at 10.99.0.10:80.
func Basic() Scenario {
	return Scenario{
		Name:        "basic",
		Description: "two clusters with distinct CIDRs; c2 serves web at 10.99.0.10:80 from three pods",
		Clusters: []ClusterSpec{
			{
				ID:          "c1",
				PodCIDR:     netip.MustParsePrefix("10.8.0.0/16"),
				ServiceCIDR: netip.MustParsePrefix("10.88.0.0/16"),
				Pods:        []string{"c1-pod-1", "c1-pod-2"},
			},
			{
				ID:          "c2",
				PodCIDR:     netip.MustParsePrefix("10.9.0.0/16"),
				ServiceCIDR: netip.MustParsePrefix("10.99.0.0/16"),
				Pods:        []string{"c2-web-1", "c2-web-2", "c2-web-3"},
				Services: []ServiceSpec{{
					Name:       "web",
					ClusterIP:  netip.MustParseAddr("10.99.0.10"),
					Port:       80,
					TargetPort: WhereamiPort,
					Backends:   []string{"c2-web-1", "c2-web-2", "c2-web-3"},
				}},
			},
		},
	}
}

// Globalnet is the Submariner Globalnet tutorial's topology: g1 and g2 with
// the same pod and service CIDRs, told apart by their global CIDRs. g2
// exports the ClusterIP service web (three backends) and the headless
// service db (three pods, each with its own global IP); g1 exports hello,
// so that g2's pods have something to call.
func Globalnet() Scenario {
	pods := netip.MustParsePrefix("10.7.0.0/16")
	svcs := netip.MustParsePrefix("10.77.0.0/16")
	clusterIP := netip.MustParseAddr("10.77.0.10")
	return Scenario{
		Name:        "globalnet",
		Description: "two clusters with the same CIDRs joined by Globalnet; g2 exports web (ClusterIP) and db (headless)",
		Clusters: []ClusterSpec{
			{
				ID:          "g1",
				PodCIDR:     pods,
				ServiceCIDR: svcs,
				GlobalCIDR:  netip.MustParsePrefix("242.1.0.0/16"),
				Pods:        []string{"g1-pod-1", "g1-pod-2"},
				Services: []ServiceSpec{{
					Name:       "hello",
					ClusterIP:  clusterIP,
					Port:       80,
					TargetPort: WhereamiPort,
					Backends:   []string{"g1-pod-2"},
				}},
			},
			{
				ID:          "g2",
				PodCIDR:     pods,
				ServiceCIDR: svcs,
				GlobalCIDR:  netip.MustParsePrefix("242.2.0.0/16"),
				Pods:        []string{"g2-web-1", "g2-web-2", "g2-web-3", "g2-db-0", "g2-db-1", "g2-db-2"},
				Services: []ServiceSpec{
					{
						Name:       "web",
						ClusterIP:  clusterIP,
						Port:       80,
						TargetPort: WhereamiPort,
						Backends:   []string{"g2-web-1", "g2-web-2", "g2-web-3"},
					},
					{
						Name:       "db",
						Headless:   true,
						TargetPort: WhereamiPort,
						Backends:   []string{"g2-db-0", "g2-db-1", "g2-db-2"},
					},
				},
			},
		},
	}
}

var scenarios = map[string]func() Scenario{
	"basic":     Basic,
	"globalnet": Globalnet,
}

// RunOrder is the order `snorkel lab run` runs every built-in scenario in
// when none is named.
var RunOrder = []string{"basic", "globalnet"}

// ScenarioNames lists the built-in scenarios.
func ScenarioNames() []string {
	names := make([]string, 0, len(scenarios))
	for n := range scenarios {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// ScenarioByName returns a built-in scenario.
func ScenarioByName(name string) (Scenario, error) {
	f, ok := scenarios[name]
	if !ok {
		return Scenario{}, fmt.Errorf("lab: unknown scenario %q; use one of %s", name, strings.Join(ScenarioNames(), ", "))
	}
	return f(), nil
}
