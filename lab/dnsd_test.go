package lab

import (
	"fmt"
	"testing"

	"github.com/snorkel-net/snorkel/dnsd"
)

func TestDNSStateOfTheScenarios(t *testing.T) {
	for _, tc := range []struct {
		scenario Scenario
		want     string
	}{
		{Basic(), "c1 [c2] web:ClusterSetIP[c2 10.99.0.10]"},
		{Globalnet(), "g1 [g2] hello:ClusterSetIP[g1 242.1.0.9] web:ClusterSetIP[g2 242.2.0.9] " +
			"db:Headless[g2 g2-db-0=242.2.0.10 g2-db-1=242.2.0.11 g2-db-2=242.2.0.12]"},
	} {
		p, err := NewPlan(tc.scenario, "t-")
		if err != nil {
			t.Fatal(err)
		}
		st := p.DNSState()
		got := fmt.Sprintf("%s %v", st.LocalCluster, st.Connected)
		for _, s := range st.Services {
			typ := dnsd.TypeClusterSetIP
			if s.Headless {
				typ = dnsd.TypeHeadless
			}
			got += fmt.Sprintf(" %s:%s[", s.Name, typ)
			for _, e := range s.Exports {
				got += e.Cluster
				for _, ip := range e.IPs {
					got += " " + ip.String()
				}
				for _, ep := range e.Endpoints {
					got += fmt.Sprintf(" %s=%s", ep.Hostname, ep.Addresses[0])
				}
			}
			got += "]"
			if s.Namespace != KubeNamespace || len(s.Ports) != 1 || s.Ports[0].Name != "http" {
				t.Errorf("%s: namespace %s, ports %v; want %s and one port named http", s.Name, s.Namespace, s.Ports, KubeNamespace)
			}
		}
		if got != tc.want {
			t.Errorf("%s:\n got %s\nwant %s", tc.scenario.Name, got, tc.want)
		}
		// What the lab writes, dnsd reads.
		b, err := dnsd.EncodeState(st)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := dnsd.ParseState(b); err != nil {
			t.Errorf("%s: dnsd refuses the lab's state: %v", tc.scenario.Name, err)
		}
		if p.DNSServer().String() != p.Clusters[0].Gateway.NodeIP.String()+":53" {
			t.Errorf("dnsd at %s, want the first node's IP, port 53", p.DNSServer())
		}
	}
}
