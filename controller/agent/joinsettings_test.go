package agent

import (
	"time"

	"net/netip"
	"testing"

	"github.com/snorkel-net/snorkel/controller/api"
	submv1 "github.com/snorkel-net/snorkel/controller/api/v1"
	"github.com/snorkel-net/snorkel/gateway"
)

func espMember(s api.GatewaySettings) *api.AgentConfig {
	return &api.AgentConfig{ClusterID: "c1", CableDriver: "esp", ClusterCIDRs: []string{"10.8.0.0/16"}, ServiceCIDRs: []string{"10.88.0.0/16"}, GatewaySettings: s}
}

func TestNATTraversalOffConnectsToPrivateIPs(t *testing.T) {
	behindNAT := endpoint("c2-a", "c2", "esp", 1, func(s *submv1.EndpointSpec) {
		s.PublicIP, s.NATEnabled, s.BackendConfig[BackendConfigUDPPort] = "198.51.100.9", true, "4600"
	})
	for _, tc := range []struct {
		name     string
		natt     api.GatewaySettings
		want     string
		usingNAT bool
	}{
		{"NAT traversal on (subctl's default) takes the public IP", api.GatewaySettings{}, "198.51.100.9:4600", true},
		{"--natt=false takes the private IP and keeps the port", api.GatewaySettings{NATTraversalOff: true}, "172.18.0.9:4600", false},
	} {
		m := espMember(tc.natt)
		peers := withJoinSettings(m, plan(newLocal(&Config{Port: 4500, Member: m}), []*submv1.Endpoint{behindNAT}, nil))
		if len(peers) != 1 || peers[0].remote == nil {
			t.Fatalf("%s: peers %+v", tc.name, peers)
		}
		p := peers[0]
		if p.remote.Endpoint != netip.MustParseAddrPort(tc.want) || p.usingIP != p.remote.Endpoint.Addr().String() || p.usingNAT != tc.usingNAT {
			t.Errorf("%s: endpoint %v, using %s (NAT %v); want %s", tc.name, p.remote.Endpoint, p.usingIP, p.usingNAT, tc.want)
		}
	}
}

func TestPreferredServerDecidesWhoInitiatesIKE(t *testing.T) {
	yes, no := true, false
	for _, tc := range []struct {
		name          string
		local, remote bool
		want          *bool
	}{
		{"this gateway alone prefers to serve: it answers", true, false, &no},
		{"the remote alone prefers to serve: this one initiates", false, true, &yes},
		{"both prefer: the gateway's rule by cluster ID", true, true, nil},
		{"neither prefers: the gateway's rule by cluster ID", false, false, nil},
	} {
		m := espMember(api.GatewaySettings{PreferredServer: tc.local})
		e := endpoint("c2-a", "c2", "esp", 1, func(s *submv1.EndpointSpec) {
			if tc.remote {
				s.BackendConfig[BackendConfigPreferredServer] = "true"
			}
		})
		peers := withJoinSettings(m, plan(newLocal(&Config{Port: 4500, Member: m}), []*submv1.Endpoint{e}, nil))
		got := peers[0].remote.ESP.Initiate
		if (got == nil) != (tc.want == nil) || (got != nil && *got != *tc.want) {
			t.Errorf("%s: initiate %v, want %v", tc.name, fmtBool(got), fmtBool(tc.want))
		}
	}
}

func fmtBool(b *bool) string {
	if b == nil {
		return "unset"
	}
	if *b {
		return "true"
	}
	return "false"
}

func TestJoinSettingsReachTheEndpointAndTheGateway(t *testing.T) {
	m := espMember(api.GatewaySettings{NATTraversalOff: true, NATTPort: 4600, PreferredServer: true, HealthCheckOff: true})
	c := &Config{Member: m, PrivateIP: "172.18.0.5", PublicIP: "198.51.100.5", HealthCheckIP: "10.250.0.1"}
	c.applyDefaults()
	if c.Port != 4600 {
		t.Errorf("Config.Port %d, want the --nattport 4600", c.Port)
	}
	spec := localEndpointSpec(c)
	if spec.BackendConfig[BackendConfigUDPPort] != "4600" || spec.BackendConfig[BackendConfigPreferredServer] != "true" || spec.BackendConfig[BackendConfigCheckedSegments] != "true" || spec.NATEnabled {
		t.Errorf("Endpoint backend_config %v, nat_enabled %v; want udp-port 4600, preferred-server true, checked-segments true, nat_enabled false", spec.BackendConfig, spec.NATEnabled)
	}
	s := build(c, nil, nil)
	if s.Transport.Port != 4600 || s.Health.Enabled == nil || *s.Health.Enabled {
		t.Errorf("gateway spec: port %d, health enabled %v; want 4600 and off", s.Transport.Port, fmtBool(s.Health.Enabled))
	}

	// subctl's defaults: port 4500, NAT traversal and health checks on.
	d := &Config{Member: espMember(api.GatewaySettings{}), PrivateIP: "172.18.0.5", PublicIP: "198.51.100.5"}
	d.applyDefaults()
	spec = localEndpointSpec(d)
	if d.Port != gateway.DefaultPort || !spec.NATEnabled || spec.BackendConfig[BackendConfigPreferredServer] != "false" {
		t.Errorf("defaults: port %d, nat_enabled %v, backend_config %v", d.Port, spec.NATEnabled, spec.BackendConfig)
	}
	if s := build(d, nil, nil); s.Health.Enabled != nil || s.Health.Interval != 0 || s.Health.MaxPacketLossCount != 0 {
		t.Errorf("defaults: health enabled %v, interval %s, max loss %d; want the gateway's defaults", fmtBool(s.Health.Enabled), s.Health.Interval, s.Health.MaxPacketLossCount)
	}

	// --health-check-interval 3 --health-check-max-packet-loss-count 7
	e := &Config{Member: espMember(api.GatewaySettings{HealthCheckInterval: 3, HealthCheckMaxPacketLossCount: 7}), PrivateIP: "172.18.0.5"}
	e.applyDefaults()
	if s := build(e, nil, nil); s.Health.Interval != 3*time.Second || s.Health.MaxPacketLossCount != 7 {
		t.Errorf("interval %s, max loss %d; want 3s and 7", s.Health.Interval, s.Health.MaxPacketLossCount)
	}
}

// TestGlobalnetSupernetIsTheBrokersRange checks that a clusterset whose
// broker has another Globalnet range than the gateway's default (the
// tutorial's 120.0.0.0/8) gets a gateway configuration that validates.
func TestGlobalnetSupernetIsTheBrokersRange(t *testing.T) {
	m := espMember(api.GatewaySettings{})
	m.GlobalCIDR, m.GlobalnetCIDRRange, m.PSK = "120.1.0.0/24", "120.0.0.0/8", "a clusterset key of 32 bytes...."
	c := &Config{Member: m, PrivateIP: "172.18.0.5"}
	c.applyDefaults()
	s := build(c, []gateway.RemoteSpec{{ID: "g2", Endpoint: netip.MustParseAddrPort("172.18.0.6:4500"), GlobalCIDR: netip.MustParsePrefix("120.2.0.0/24")}}, nil)
	if s.Globalnet == nil || s.Globalnet.Supernet.String() != "120.0.0.0/8" {
		t.Fatalf("globalnet %+v, want supernet 120.0.0.0/8", s.Globalnet)
	}
	if err := s.Validate(); err != nil {
		t.Errorf("the spec does not validate: %v", err)
	}
}
