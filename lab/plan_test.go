package lab

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
)

func TestBasicPlanAddresses(t *testing.T) {
	p, err := NewPlan(Basic(), "snk-")
	if err != nil {
		t.Fatal(err)
	}
	c1, c2 := p.Cluster("c1"), p.Cluster("c2")
	if c1 == nil || c2 == nil {
		t.Fatal("basic plan lacks c1 or c2")
	}
	a := netip.MustParseAddr
	for _, tc := range []struct {
		what      string
		got, want any
	}{
		{"c1 underlay", c1.Gateway.UnderlayIP, netip.MustParsePrefix("198.18.0.1/15")},
		{"c2 underlay", c2.Gateway.UnderlayIP, netip.MustParsePrefix("198.18.0.2/15")},
		{"c2 endpoint", c2.Gateway.Endpoint(), netip.MustParseAddrPort("198.18.0.2:4500")},
		{"c1 node", c1.Gateway.NodeIP, a("10.8.0.1")},
		{"c1 tun", c1.Gateway.TUN, "snk-c1"},
		{"c2 gateway ns", c2.Gateway.NS, "c2-gw"},
		{"first c1 pod", c1.Pods[0].IP, a("10.8.0.11")},
		{"third c2 pod", c2.Pods[2].IP, a("10.9.0.13")},
		{"pod node link", c2.Pods[0].NodeLink, "v-c2-web-1"},
		{"web backends", len(c2.Services[0].Backends), 3},
		{"second web backend", c2.Services[0].Backends[1].IP, a("10.9.0.12")},
	} {
		if tc.got != tc.want {
			t.Errorf("%s = %v, want %v", tc.what, tc.got, tc.want)
		}
	}
	wantNS := []string{"underlay", "c1-gw", "c1-pod-1", "c1-pod-2", "c2-gw", "c2-web-1", "c2-web-2", "c2-web-3"}
	if got := p.Namespaces(); !slices.Equal(got, wantNS) {
		t.Errorf("Namespaces() = %v, want %v", got, wantNS)
	}
	if r := p.Remotes(c1); len(r) != 1 || r[0].Spec.ID != "c2" {
		t.Errorf("Remotes(c1) = %v, want just c2", r)
	}
}

// TestOverlappingClustersPlan shows that the plan keeps clusters apart by
// namespace, not by address: Globalnet's clusters with the same CIDRs get
// the same pod addresses, each in its own namespaces.
func TestOverlappingClustersPlan(t *testing.T) {
	cluster := func(id string) ClusterSpec {
		return ClusterSpec{
			ID:          id,
			PodCIDR:     netip.MustParsePrefix("10.7.0.0/16"),
			ServiceCIDR: netip.MustParsePrefix("10.77.0.0/16"),
			Pods:        []string{id + "-pod-1", id + "-pod-2"},
		}
	}
	p, err := NewPlan(Scenario{Name: "globalnet", Clusters: []ClusterSpec{cluster("g1"), cluster("g2")}}, "snk-")
	if err != nil {
		t.Fatal(err)
	}
	g1, g2 := p.Cluster("g1"), p.Cluster("g2")
	if g1.Pods[0].IP != g2.Pods[0].IP || g1.Pods[0].NS == g2.Pods[0].NS {
		t.Errorf("g1 pod %v and g2 pod %v: want the same address in different namespaces", g1.Pods[0], g2.Pods[0])
	}
	if g1.Gateway.UnderlayIP == g2.Gateway.UnderlayIP {
		t.Error("gateways share an underlay address")
	}
	// Each gateway's node address is its health-check address, which the
	// other gateways must tell apart.
	if g1.Gateway.NodeIP != netip.MustParseAddr("10.7.0.1") || g2.Gateway.NodeIP != netip.MustParseAddr("10.7.0.2") {
		t.Errorf("g1's node is %s and g2's %s; want 10.7.0.1 and 10.7.0.2", g1.Gateway.NodeIP, g2.Gateway.NodeIP)
	}
}

func TestPlanRefusesBadScenarios(t *testing.T) {
	for _, tc := range []struct {
		name   string
		edit   func(*Scenario)
		prefix string
		want   string
	}{
		{"no clusters", func(s *Scenario) { s.Clusters = nil }, "snk-", "no clusters"},
		{"bad prefix", func(*Scenario) {}, "Snk", "prefix"},
		{"long prefix makes long TUN name", func(*Scenario) {}, "snorkel-lab-tst-", "longer than 15"},
		{"cluster ID not a label", func(s *Scenario) { s.Clusters[0].ID = "C_1" }, "snk-", "DNS-1123"},
		{"pod name too long", func(s *Scenario) { s.Clusters[0].Pods[0] = "a-very-long-pod-name" }, "snk-", "at most 13"},
		{"two pods one namespace", func(s *Scenario) { s.Clusters[1].Pods[0] = "c1-pod-1" }, "snk-", "share namespace"},
		{"pod named like a gateway", func(s *Scenario) { s.Clusters[0].Pods[0] = "c2-gw" }, "snk-", "share namespace"},
		{"ClusterIP outside service CIDR", func(s *Scenario) {
			s.Clusters[1].Services[0].ClusterIP = netip.MustParseAddr("10.88.0.10")
		}, "snk-", "outside the service CIDR"},
		{"target port the pods do not serve", func(s *Scenario) { s.Clusters[1].Services[0].TargetPort = 8080 }, "snk-", "serve only on 80"},
		{"backend from another cluster", func(s *Scenario) { s.Clusters[1].Services[0].Backends[0] = "c1-pod-1" }, "snk-", "not a pod of the cluster"},
		{"IPv6 pod CIDR", func(s *Scenario) { s.Clusters[0].PodCIDR = netip.MustParsePrefix("fd00::/64") }, "snk-", "IPv4"},
		{"pod CIDR with host bits", func(s *Scenario) { s.Clusters[0].PodCIDR = netip.MustParsePrefix("10.8.0.1/16") }, "snk-", "host bits"},
		{"pods overflow a /24", func(s *Scenario) {
			s.Clusters[0].PodCIDR = netip.MustParsePrefix("10.8.0.0/24")
			s.Clusters[0].Pods = nil
			for i := range 250 {
				s.Clusters[0].Pods = append(s.Clusters[0].Pods, "p"+strings.Repeat("x", i%5)+string(rune('a'+i%26))+string(rune('a'+i/26)))
			}
		}, "snk-", "do not fit"},
		{"eleven clusters share a pod CIDR", func(s *Scenario) {
			for i := range maxNodesPerCIDR {
				c := s.Clusters[0]
				c.ID, c.Pods = fmt.Sprintf("x%d", i), []string{fmt.Sprintf("x%d-pod", i)}
				s.Clusters = append(s.Clusters, c)
			}
		}, "snk-", "share the pod CIDR"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := Basic()
			tc.edit(&s)
			_, err := NewPlan(s, tc.prefix)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("NewPlan error = %v, want one mentioning %q", err, tc.want)
			}
		})
	}
}

func TestGlobalnetPlanAllocatesGlobalIPs(t *testing.T) {
	p, err := NewPlan(Globalnet(), "snk-")
	if err != nil {
		t.Fatal(err)
	}
	if !p.Globalnet() {
		t.Fatal("the globalnet plan does not say it is one")
	}
	g1, g2 := p.Cluster("g1"), p.Cluster("g2")
	a := netip.MustParseAddr
	db0, _ := p.Pod("g2-db-0")
	db2, _ := p.Pod("g2-db-2")
	web1, _ := p.Pod("g2-web-1")
	for _, tc := range []struct {
		what      string
		got, want any
	}{
		{"same pod address in both clusters", g1.Pods[0].IP, g2.Pods[0].IP},
		{"same ClusterIP in both clusters", g1.Services[0].Spec.ClusterIP, g2.Services[0].Spec.ClusterIP},
		// After the network address and the 8 default cluster egress IPs.
		{"g1 hello global IP", g1.Services[0].GlobalIP, a("242.1.0.9")},
		{"g2 web global IP", g2.Services[0].GlobalIP, a("242.2.0.9")},
		{"first db pod global IP", db0.GlobalIP, a("242.2.0.10")},
		{"last db pod global IP", db2.GlobalIP, a("242.2.0.12")},
		{"db backend carries its global IP", g2.Services[1].Backends[0].GlobalIP, a("242.2.0.10")},
		{"web pods have no global IP of their own", web1.GlobalIP, netip.Addr{}},
		{"headless service has no global IP", g2.Services[1].GlobalIP, netip.Addr{}},
	} {
		if tc.got != tc.want {
			t.Errorf("%s = %v, want %v", tc.what, tc.got, tc.want)
		}
	}
	if got := g1.RoutedCIDRs(); !slices.Equal(got, []netip.Prefix{netip.MustParsePrefix("242.1.0.0/16")}) {
		t.Errorf("g1 is routed by %v, want its global CIDR alone", got)
	}
	if rs := g2.ServiceRuleset(); strings.Contains(rs, "db") || !strings.Contains(rs, "service-web") {
		t.Errorf("g2's ruleset must balance web and leave headless db alone:\n%s", rs)
	}
}

func TestGlobalnetPlanRefusesBadScenarios(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*Scenario)
		want string
	}{
		{"one cluster without a global CIDR", func(s *Scenario) { s.Clusters[1].GlobalCIDR = netip.Prefix{} }, "every cluster"},
		{"IPv6 global CIDR", func(s *Scenario) { s.Clusters[0].GlobalCIDR = netip.MustParsePrefix("fd00::/64") }, "IPv4"},
		{"headless with a ClusterIP", func(s *Scenario) {
			s.Clusters[1].Services[1].ClusterIP = netip.MustParseAddr("10.77.0.20")
		}, "has no ClusterIP"},
		{"a pod in two headless services", func(s *Scenario) {
			s.Clusters[1].Services = append(s.Clusters[1].Services, ServiceSpec{Name: "db2", Headless: true, TargetPort: WhereamiPort, Backends: []string{"g2-db-1"}})
		}, "a pod has one global IP"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := Globalnet()
			tc.edit(&s)
			_, err := NewPlan(s, "snk-")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("NewPlan error = %v, want one mentioning %q", err, tc.want)
			}
		})
	}
}

func TestScenarioByName(t *testing.T) {
	for _, n := range RunOrder {
		if _, err := ScenarioByName(n); err != nil {
			t.Error(err)
		}
	}
	if _, err := ScenarioByName("nope"); err == nil || !strings.Contains(err.Error(), "basic") {
		t.Errorf("unknown scenario error = %v, want one listing the known ones", err)
	}
}
