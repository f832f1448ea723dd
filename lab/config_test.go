package lab

import (
	"reflect"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/snorkel-net/snorkel/gateway"
	"github.com/snorkel-net/snorkel/transport"
	"github.com/snorkel-net/snorkel/transport/wireguard"
)

func TestGatewayConfigsValidateAndRoundTrip(t *testing.T) {
	p, err := NewPlan(Basic(), "snk-")
	if err != nil {
		t.Fatal(err)
	}
	pubs := map[string]string{}
	for _, id := range []string{"c1", "c2"} {
		k, err := wireguard.GenerateKey()
		if err != nil {
			t.Fatal(err)
		}
		pubs[id] = k.Public().String()
	}
	for _, kind := range transport.Kinds {
		t.Run(kind, func(t *testing.T) {
			cfg, err := p.GatewayConfig(p.Cluster("c1"), kind, "/run/snorkel-lab", pubs)
			if err != nil {
				t.Fatal(err)
			}
			b, err := MarshalConfig(cfg)
			if err != nil {
				t.Fatal(err)
			}
			// Strict: every key the lab writes must be a field the gateway
			// reads.
			var back gateway.Config
			if err := yaml.UnmarshalStrict(b, &back); err != nil {
				t.Fatalf("gateway cannot read the lab's config: %v\n%s", err, b)
			}
			if !reflect.DeepEqual(back, cfg) {
				t.Errorf("round trip changed the config:\n got %+v\nwant %+v", back, cfg)
			}
			text := string(b)
			for _, want := range []string{
				"id: c1", "10.8.0.0/16", "10.88.0.0/16", "name: snk-c1", "address: 10.8.0.1",
				"type: " + kind, "endpoint: 198.18.0.2:4500", "id: c2", "10.9.0.0/16", "10.99.0.0/16",
				"metricsAddress: 127.0.0.1:9898",
			} {
				if !strings.Contains(text, want) {
					t.Errorf("config lacks %q:\n%s", want, text)
				}
			}
			hasWG := strings.Contains(text, "privateKeyFile: /run/snorkel-lab/keys/c1.key") && strings.Contains(text, "publicKey: "+pubs["c2"])
			if hasWG != (kind == transport.WireGuard) {
				t.Errorf("wireguard keys present = %v for transport %s:\n%s", hasWG, kind, text)
			}
		})
	}
}

func TestGatewayConfigNamesMissingKey(t *testing.T) {
	p, err := NewPlan(Basic(), "snk-")
	if err != nil {
		t.Fatal(err)
	}
	_, err = p.GatewayConfig(p.Cluster("c1"), transport.WireGuard, "/run/snorkel-lab", nil)
	if err == nil || !strings.Contains(err.Error(), "remotes[0].wireguard.publicKey") {
		t.Errorf("error = %v, want one naming remotes[0].wireguard.publicKey", err)
	}
}

func TestGatewayConfigRefusesOverlapWithoutGlobalnet(t *testing.T) {
	s := Basic()
	s.Clusters[1].PodCIDR = s.Clusters[0].PodCIDR
	p, err := NewPlan(s, "snk-")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.GatewayConfig(p.Cluster("c1"), transport.VXLAN, "/tmp", nil); err == nil {
		t.Error("overlapping pod CIDRs accepted; the gateway cannot route them without Globalnet")
	}
}

func TestServiceRuleset(t *testing.T) {
	p, err := NewPlan(Basic(), "snk-")
	if err != nil {
		t.Fatal(err)
	}
	if rs := p.Cluster("c1").ServiceRuleset(); rs != "" {
		t.Errorf("c1 has no services but gets a ruleset:\n%s", rs)
	}
	rs := p.Cluster("c2").ServiceRuleset()
	for _, want := range []string{
		"table ip " + ServiceTable,
		"10.99.0.10 . tcp . 80 : goto service-web",
		"numgen random mod 3 vmap { 0 : goto endpoint-web-c2-web-1, 1 : goto endpoint-web-c2-web-2, 2 : goto endpoint-web-c2-web-3 }",
		"dnat to 10.9.0.11:80", "dnat to 10.9.0.12:80", "dnat to 10.9.0.13:80",
		"hook prerouting", "hook output",
	} {
		if !strings.Contains(rs, want) {
			t.Errorf("ruleset lacks %q:\n%s", want, rs)
		}
	}
	if strings.Contains(rs, "masquerade") || strings.Contains(rs, "snat") {
		t.Errorf("ruleset translates sources; backends must see the client's address:\n%s", rs)
	}
}

func TestGlobalnetGatewayConfigExportsServicesAndRoutesGlobalCIDRs(t *testing.T) {
	p, err := NewPlan(Globalnet(), "snk-")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := p.GatewayConfig(p.Cluster("g2"), transport.VXLAN, "/tmp", nil)
	if err != nil {
		t.Fatalf("the lab's Globalnet config does not validate: %v", err)
	}
	b, err := MarshalConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var back gateway.Config
	if err := yaml.UnmarshalStrict(b, &back); err != nil {
		t.Fatalf("gateway cannot read the lab's config: %v\n%s", err, b)
	}
	text := string(b)
	for _, want := range []string{
		"globalCIDR: 242.2.0.0/16", "globalCIDR: 242.1.0.0/16",
		"globalIP: 242.2.0.9", "kind: service", "localIP: 10.77.0.10",
		"globalIP: 242.2.0.10", "kind: headlessPod", "localIP: 10.7.0.14", "name: db/g2-db-0",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("config lacks %q:\n%s", want, text)
		}
	}
	if len(back.Remotes) != 1 || len(back.Remotes[0].PodCIDRs)+len(back.Remotes[0].ServiceCIDRs) != 0 {
		t.Errorf("the remote's own CIDRs, the same as g2's, must stay out of the config:\n%s", text)
	}
	if strings.Contains(text, "clusterEgress") {
		t.Errorf("the lab leaves the cluster egress IPs to the gateway's default:\n%s", text)
	}
}

func TestGlobalnetScenarioRefusesKernelRouting(t *testing.T) {
	_, err := Up(t.Context(), Options{Scenario: Globalnet(), Transport: TransportKernel, StateDir: t.TempDir()})
	if err == nil || !strings.Contains(err.Error(), "translation") {
		t.Errorf("Up = %v, want a refusal naming Globalnet's translation", err)
	}
}
