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
}

// ServiceSpec is a TCP ClusterIP service.
type ServiceSpec struct {
	Name      string     `json:"name"`
	ClusterIP netip.Addr `json:"clusterIP"`
	Port      uint16     `json:"port"`
	// TargetPort is the port the backends listen on.
	TargetPort uint16 `json:"targetPort"`
	// Backends names pods of the same cluster.
	Backends []string `json:"backends"`
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

var scenarios = map[string]func() Scenario{
	"basic": Basic,
}

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
