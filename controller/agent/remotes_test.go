package agent

import (
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/snorkel-net/snorkel/controller/api"
	submv1 "github.com/snorkel-net/snorkel/controller/api/v1"
	"github.com/snorkel-net/snorkel/gateway"
	"github.com/snorkel-net/snorkel/natengine"
)

const (
	keyA = "mGv3MpoCFq1b2zUeVqSd8sDh5sWm6Zb4oxk4rS9IT0A="
	keyB = "cGK1zqgSn6xvUtbNpmAq7k0kO3ZbO6v2r0y4D2q3P2o="
)

func endpoint(name, cluster, backend string, created int64, mod func(*submv1.EndpointSpec)) *submv1.Endpoint {
	e := &submv1.Endpoint{
		ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.Unix(created, 0)},
		Spec: submv1.EndpointSpec{
			ClusterID:     cluster,
			CableName:     cableName(cluster, "172.18.0.9"),
			Hostname:      cluster + "-gw",
			Subnets:       []string{"10.9.0.0/16", "10.99.0.0/16"},
			PrivateIP:     "172.18.0.9",
			Backend:       backend,
			BackendConfig: map[string]string{BackendConfigPublicKey: keyB},
		},
	}
	if mod != nil {
		mod(&e.Spec)
	}
	return e
}

func cluster(id string, pods, svcs, global []string) *submv1.Cluster {
	return &submv1.Cluster{Spec: submv1.ClusterSpec{ClusterID: id, ClusterCIDR: pods, ServiceCIDR: svcs, GlobalCIDR: global}}
}

func wgLocal() local {
	return newLocal(&Config{Port: 4500, Member: &api.AgentConfig{
		ClusterID: "c1", CableDriver: "wireguard", ClusterCIDRs: []string{"10.8.0.0/16"}, ServiceCIDRs: []string{"10.88.0.0/16"},
	}})
}

func TestPlanBuildsRemotesFromTheBroker(t *testing.T) {
	gn := newLocal(&Config{Port: 4500, Member: &api.AgentConfig{
		ClusterID: "c1", CableDriver: "wireguard", ClusterCIDRs: []string{"10.8.0.0/16"}, ServiceCIDRs: []string{"10.88.0.0/16"}, GlobalCIDR: "242.1.0.0/16",
	}})
	esp := newLocal(&Config{Port: 4500, Member: &api.AgentConfig{
		ClusterID: "c1", CableDriver: "esp", ClusterCIDRs: []string{"10.8.0.0/16"}, ServiceCIDRs: []string{"10.88.0.0/16"},
	}})
	tests := []struct {
		name      string
		local     local
		endpoints []*submv1.Endpoint
		clusters  map[string]*submv1.Cluster
		want      *gateway.Remote // nil: the one peer is not connected
		problem   string          // in the peer's problem
		usingNAT  bool
	}{
		{
			name:      "the CIDRs come from the Cluster and the address is the private IP",
			local:     wgLocal(),
			endpoints: []*submv1.Endpoint{endpoint("c2-a", "c2", "wireguard", 1, nil)},
			clusters:  map[string]*submv1.Cluster{"c2": cluster("c2", []string{"10.9.0.0/16"}, []string{"10.99.0.0/16"}, nil)},
			want: &gateway.Remote{ID: "c2", PodCIDRs: []string{"10.9.0.0/16"}, ServiceCIDRs: []string{"10.99.0.0/16"},
				Endpoint: "172.18.0.9:4500", WireGuard: &gateway.WireGuardRemoteConfig{PublicKey: keyB}},
		},
		{
			name:  "the public IP wins and the published UDP port is used",
			local: wgLocal(),
			endpoints: []*submv1.Endpoint{endpoint("c2-a", "c2", "wireguard", 1, func(s *submv1.EndpointSpec) {
				s.PublicIP, s.NATEnabled, s.BackendConfig[BackendConfigUDPPort] = "198.51.100.9", true, "4600"
			})},
			want: &gateway.Remote{ID: "c2", PodCIDRs: []string{"10.9.0.0/16", "10.99.0.0/16"},
				Endpoint: "198.51.100.9:4600", NAT: true, WireGuard: &gateway.WireGuardRemoteConfig{PublicKey: keyB}},
			usingNAT: true,
		},
		{
			name:  "an IPv6 gateway address gets brackets",
			local: wgLocal(),
			endpoints: []*submv1.Endpoint{endpoint("c2-a", "c2", "wireguard", 1, func(s *submv1.EndpointSpec) {
				s.PrivateIP = "fd00::9"
			})},
			want: &gateway.Remote{ID: "c2", PodCIDRs: []string{"10.9.0.0/16", "10.99.0.0/16"},
				Endpoint: "[fd00::9]:4500", WireGuard: &gateway.WireGuardRemoteConfig{PublicKey: keyB}},
		},
		{
			name:  "a Snorkel gateway's segments are taken as checked",
			local: wgLocal(),
			endpoints: []*submv1.Endpoint{endpoint("c2-a", "c2", "wireguard", 1, func(s *submv1.EndpointSpec) {
				s.BackendConfig[BackendConfigCheckedSegments] = "true"
			})},
			want: &gateway.Remote{ID: "c2", PodCIDRs: []string{"10.9.0.0/16", "10.99.0.0/16"},
				Endpoint: "172.18.0.9:4500", CheckedSegments: true, WireGuard: &gateway.WireGuardRemoteConfig{PublicKey: keyB}},
		},
		{
			name:  "a gateway that says something else than true is not",
			local: wgLocal(),
			endpoints: []*submv1.Endpoint{endpoint("c2-a", "c2", "wireguard", 1, func(s *submv1.EndpointSpec) {
				s.BackendConfig[BackendConfigCheckedSegments] = "yes please"
			})},
			want: &gateway.Remote{ID: "c2", PodCIDRs: []string{"10.9.0.0/16", "10.99.0.0/16"},
				Endpoint: "172.18.0.9:4500", WireGuard: &gateway.WireGuardRemoteConfig{PublicKey: keyB}},
		},
		{
			name:      "the newest Endpoint of a cluster counts",
			local:     wgLocal(),
			endpoints: []*submv1.Endpoint{endpoint("c2-new", "c2", "wireguard", 20, func(s *submv1.EndpointSpec) { s.PrivateIP = "172.18.0.20" }), endpoint("c2-old", "c2", "wireguard", 10, nil)},
			want: &gateway.Remote{ID: "c2", PodCIDRs: []string{"10.9.0.0/16", "10.99.0.0/16"},
				Endpoint: "172.18.0.20:4500", WireGuard: &gateway.WireGuardRemoteConfig{PublicKey: keyB}},
		},
		{
			name:      "esp remotes carry their IKE identity and libreswan is esp",
			local:     esp,
			endpoints: []*submv1.Endpoint{endpoint("c2-a", "c2", "libreswan", 1, nil)},
			want: &gateway.Remote{ID: "c2", PodCIDRs: []string{"10.9.0.0/16", "10.99.0.0/16"},
				Endpoint: "172.18.0.9:4500", ESP: &gateway.ESPRemoteConfig{ID: "c2"}},
		},
		{
			name:  "Globalnet routes the global CIDR and allows overlapping CIDRs",
			local: gn,
			endpoints: []*submv1.Endpoint{endpoint("c2-a", "c2", "wireguard", 1, func(s *submv1.EndpointSpec) {
				s.Subnets = []string{"242.2.0.0/16"}
			})},
			clusters: map[string]*submv1.Cluster{"c2": cluster("c2", []string{"10.8.0.0/16"}, []string{"10.88.0.0/16"}, []string{"242.2.0.0/16"})},
			want: &gateway.Remote{ID: "c2", PodCIDRs: []string{"10.8.0.0/16"}, ServiceCIDRs: []string{"10.88.0.0/16"}, GlobalCIDR: "242.2.0.0/16",
				Endpoint: "172.18.0.9:4500", WireGuard: &gateway.WireGuardRemoteConfig{PublicKey: keyB}},
		},
		{
			name:  "Globalnet without a Cluster takes the Endpoint's one subnet",
			local: gn,
			endpoints: []*submv1.Endpoint{endpoint("c2-a", "c2", "wireguard", 1, func(s *submv1.EndpointSpec) {
				s.Subnets = []string{"242.2.0.0/16"}
			})},
			want: &gateway.Remote{ID: "c2", GlobalCIDR: "242.2.0.0/16", Endpoint: "172.18.0.9:4500",
				WireGuard: &gateway.WireGuardRemoteConfig{PublicKey: keyB}},
		},
		{
			name:      "different cable drivers cannot connect",
			local:     wgLocal(),
			endpoints: []*submv1.Endpoint{endpoint("c2-a", "c2", "vxlan", 1, nil)},
			problem:   "cable drivers differ",
		},
		{
			name:      "a remote without a global CIDR cannot join a Globalnet cluster",
			local:     gn,
			endpoints: []*submv1.Endpoint{endpoint("c2-a", "c2", "wireguard", 1, nil)},
			clusters:  map[string]*submv1.Cluster{"c2": cluster("c2", []string{"10.9.0.0/16"}, []string{"10.99.0.0/16"}, []string{})},
			problem:   "no global CIDR",
		},
		{
			name:      "a WireGuard remote needs its public key",
			local:     wgLocal(),
			endpoints: []*submv1.Endpoint{endpoint("c2-a", "c2", "wireguard", 1, func(s *submv1.EndpointSpec) { delete(s.BackendConfig, BackendConfigPublicKey) })},
			problem:   `backend_config "publicKey"`,
		},
		{
			name:      "a bad UDP port is refused",
			local:     wgLocal(),
			endpoints: []*submv1.Endpoint{endpoint("c2-a", "c2", "wireguard", 1, func(s *submv1.EndpointSpec) { s.BackendConfig[BackendConfigUDPPort] = "70000" })},
			problem:   "not a UDP port",
		},
		{
			name:      "CIDRs that overlap this cluster's need Globalnet",
			local:     wgLocal(),
			endpoints: []*submv1.Endpoint{endpoint("c2-a", "c2", "wireguard", 1, func(s *submv1.EndpointSpec) { s.Subnets = []string{"10.8.128.0/17"} })},
			problem:   "overlaps 10.8.0.0/16 of this cluster",
		},
		{
			name:      "a CIDR with host bits set is refused",
			local:     wgLocal(),
			endpoints: []*submv1.Endpoint{endpoint("c2-a", "c2", "wireguard", 1, func(s *submv1.EndpointSpec) { s.Subnets = []string{"10.9.0.1/16"} })},
			problem:   "host bits",
		},
		{
			name:      "no address to reach",
			local:     wgLocal(),
			endpoints: []*submv1.Endpoint{endpoint("c2-a", "c2", "wireguard", 1, func(s *submv1.EndpointSpec) { s.PrivateIP = "" })},
			problem:   "no address",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			own := endpoint("c1-own", "c1", "wireguard", 1, nil)
			peers := plan(tc.local, append(tc.endpoints, own), tc.clusters)
			if len(peers) != 1 {
				t.Fatalf("%d peers, want 1 (this cluster's own Endpoint is no peer): %+v", len(peers), peers)
			}
			p := peers[0]
			if tc.want == nil {
				if p.remote != nil || !strings.Contains(p.problem, tc.problem) || !strings.Contains(p.problem, "c2") {
					t.Errorf("remote %+v, problem %q; want no remote and a problem naming the cluster and saying %q", p.remote, p.problem, tc.problem)
				}
				return
			}
			// Every case's remote gateway is the Endpoint's hostname.
			want := *tc.want
			want.Gateway = "c2-gw"
			if p.problem != "" || p.remote == nil || !reflect.DeepEqual(remoteConfig(*p.remote), want) {
				t.Errorf("remote\n %+v (problem %q)\nwant\n %+v", p.remote, p.problem, want)
			}
			if p.usingNAT != tc.usingNAT {
				t.Errorf("usingNAT %v, want %v", p.usingNAT, tc.usingNAT)
			}
		})
	}
}

func TestPlanRefusesTheLaterOfTwoOverlappingRemotes(t *testing.T) {
	peers := plan(wgLocal(), []*submv1.Endpoint{
		endpoint("c3-a", "c3", "wireguard", 1, nil),
		endpoint("c2-a", "c2", "wireguard", 1, nil),
	}, nil)
	if len(peers) != 2 || peers[0].endpoint.ClusterID != "c2" || peers[1].endpoint.ClusterID != "c3" {
		t.Fatalf("peers %+v, want c2 then c3", peers)
	}
	if peers[0].remote == nil || peers[1].remote != nil || !strings.Contains(peers[1].problem, `of cluster "c2"`) {
		t.Errorf("c2 %+v, c3 %+v %q: want c2 connected and c3 refused for overlapping c2", peers[0].remote, peers[1].remote, peers[1].problem)
	}
	if rs := remotes(peers); len(rs) != 1 || rs[0].ID != "c2" {
		t.Errorf("remotes %+v, want c2 only", rs)
	}
}

func TestConnectionsMirrorTheDataPlane(t *testing.T) {
	peers := plan(wgLocal(), []*submv1.Endpoint{
		endpoint("c2-a", "c2", "wireguard", 1, func(s *submv1.EndpointSpec) { s.PublicIP, s.NATEnabled = "198.51.100.9", true }),
		endpoint("c3-a", "c3", "wireguard", 1, func(s *submv1.EndpointSpec) { s.Subnets = []string{"10.10.0.0/16"} }),
		endpoint("c4-a", "c4", "vxlan", 1, nil),
	}, nil)
	rtt := &RTT{Last: 1200 * time.Microsecond, Min: 850 * time.Microsecond, Average: 1100 * time.Microsecond, Max: 2 * time.Millisecond, StdDev: 200 * time.Microsecond}
	got := connections(peers, []RemoteStatus{
		{ID: "c2", Status: submv1.Connected, Message: "handshake completed", RTT: rtt},
		{ID: "c9", Status: submv1.Connected},
	})
	if len(got) != 3 {
		t.Fatalf("%d connections, want 3: %+v", len(got), got)
	}
	c2, c3, c4 := got[0], got[1], got[2]
	wantRTT := &submv1.LatencyRTTSpec{Last: "1.2ms", Min: "850µs", Average: "1.1ms", Max: "2ms", StdDev: "200µs"}
	if c2.Status != submv1.Connected || c2.StatusMessage != "handshake completed" || !reflect.DeepEqual(c2.LatencyRTT, wantRTT) ||
		c2.UsingIP != "198.51.100.9" || !c2.UsingNAT || c2.Endpoint.ClusterID != "c2" {
		t.Errorf("c2: %+v, want connected with the data plane's message and RTT, using 198.51.100.9 across NAT", c2)
	}
	if c3.Status != submv1.Connecting || c3.LatencyRTT != nil {
		t.Errorf("c3 without a report: %+v, want connecting", c3)
	}
	if c4.Status != submv1.ConnectionError || !strings.Contains(c4.StatusMessage, "cable drivers differ") {
		t.Errorf("c4 with vxlan: %+v, want an error saying the cable drivers differ", c4)
	}
}

func TestEndpointNamesFollowSubmariner(t *testing.T) {
	spec := submv1.EndpointSpec{ClusterID: "cluster-a", CableName: cableName("cluster-a", "172.18.0.5")}
	if spec.CableName != "submariner-cable-cluster-a-172-18-0-5" {
		t.Errorf("cable name %q", spec.CableName)
	}
	if n := endpointName(&spec); n != "cluster-a-submariner-cable-cluster-a-172-18-0-5" {
		t.Errorf("endpoint name %q", n)
	}
	v6 := submv1.EndpointSpec{ClusterID: "c1", CableName: cableName("c1", "fd00::5")}
	if n := endpointName(&v6); n != "c1-submariner-cable-c1-fd00--5" {
		t.Errorf("IPv6 endpoint name %q", n)
	}
}

// remoteConfig is r as the gateway's file writes it.
func remoteConfig(r gateway.RemoteSpec) gateway.Remote {
	return (&gateway.Spec{Remotes: []gateway.RemoteSpec{r}}).Config().Remotes[0]
}

func TestGatewayConfigFillsTheTemplate(t *testing.T) {
	c := &Config{
		Member: &api.AgentConfig{ClusterID: "c1", CableDriver: "esp", PSK: "clustersetsecretkey", ClusterCIDRs: []string{"10.8.0.0/16"},
			ServiceCIDRs: []string{"10.88.0.0/16"}, GlobalCIDR: "242.1.0.0/16"},
		Port:          4501,
		HealthCheckIP: "10.8.255.254",
		Gateway: gateway.Spec{
			TUN:       gateway.TUNSpec{Name: "snk0"},
			Transport: gateway.TransportSpec{Kind: "vxlan", Port: 9, ESP: &gateway.ESPSpec{PSKFile: "/etc/psk", Proposals: []string{"aes256gcm16"}}},
			Globalnet: &gateway.GlobalnetSpec{MaxFlows: 1000},
		},
	}
	rs := []gateway.RemoteSpec{{ID: "c2", GlobalCIDR: netip.MustParsePrefix("242.2.0.0/16"), Endpoint: netip.MustParseAddrPort("172.18.0.9:4501"), ESP: &gateway.ESPRemoteSpec{ID: "c2"}}}
	got := build(c, rs, nil)
	want := gateway.Config{
		Cluster: gateway.Cluster{ID: "c1", PodCIDRs: []string{"10.8.0.0/16"}, ServiceCIDRs: []string{"10.88.0.0/16"}},
		TUN:     gateway.TUN{Name: "snk0", Address: "10.8.255.254"},
		Transport: gateway.TransportConfig{Type: "esp", Port: 4501,
			ESP: &gateway.ESPConfig{PSK: "clustersetsecretkey", Proposals: []string{"aes256gcm16"}}},
		Globalnet: &gateway.Globalnet{GlobalCIDR: "242.1.0.0/16", MaxFlows: 1000, ClusterEgress: gateway.GlobalIPs{NumberOfIPs: new(int)}},
		Remotes:   []gateway.Remote{remoteConfig(rs[0])},
	}
	if !reflect.DeepEqual(got.Config(), want) {
		t.Fatalf("built\n %+v\nwant\n %+v", got.Config(), want)
	}
	got.Remotes[0].ESP.ID = "changed"
	got.Transport.ESP.Proposals[0] = "changed"
	again := build(c, rs, nil)
	if !reflect.DeepEqual(again.Config(), want) || rs[0].ESP.ID != "c2" || c.Gateway.Transport.ESP.Proposals[0] != "aes256gcm16" {
		t.Errorf("changing a built spec changed the next one, the template or the remotes: %+v", again)
	}

	// The IPAM's rules become Globalnet's addresses, every one listed;
	// the template's own Globalnet settings stay.
	rules := &natengine.Rules{
		Global:        netip.MustParsePrefix("242.1.0.0/16"),
		ClusterEgress: []netip.Addr{netip.MustParseAddr("242.1.0.1")},
		Ingress:       []natengine.Ingress{{Name: "sample/web", Kind: natengine.IngressService, Global: netip.MustParseAddr("242.1.0.9"), Local: netip.MustParseAddr("10.88.0.10")}},
	}
	withRules := build(c, rs, rules)
	want.Globalnet = &gateway.Globalnet{GlobalCIDR: "242.1.0.0/16", MaxFlows: 1000, ClusterEgress: gateway.GlobalIPs{IPs: []string{"242.1.0.1"}},
		Ingress: []gateway.GlobalIngress{{Name: "sample/web", Kind: gateway.IngressKindService, GlobalIP: "242.1.0.9", LocalIP: "10.88.0.10"}}}
	if !reflect.DeepEqual(withRules.Config(), want) {
		t.Errorf("built with the IPAM's rules\n %+v\nwant\n %+v", withRules.Config().Globalnet, want.Globalnet)
	}
}

func TestProbeAddress(t *testing.T) {
	plain := local{cidrs: []netip.Prefix{netip.MustParsePrefix("10.8.0.0/16"), netip.MustParsePrefix("10.88.0.0/16")}, healthIP: netip.MustParseAddr("10.8.0.1")}
	global := local{cidrs: []netip.Prefix{netip.MustParsePrefix("242.1.0.0/16")}, globalnet: true, healthIP: netip.MustParseAddr("10.7.0.1")}
	for _, c := range []struct {
		l        local
		endpoint string
		want     string
	}{
		{plain, "10.9.0.1", "10.9.0.1"},
		{plain, "", ""},
		{plain, "not-an-ip", ""},
		{plain, "fd00::1", ""},           // another IP version than ours
		{plain, "10.8.3.3", ""},          // inside this cluster
		{plain, "10.8.0.1", ""},          // ours
		{plain, "169.254.1.1", ""},       // link-local
		{plain, "224.0.0.1", ""},         // multicast
		{global, "10.7.0.1", "10.7.0.1"}, // Globalnet: the same address on both sides
		{global, "242.1.0.9", ""},        // inside this cluster's global CIDR
		{local{}, "10.9.0.1", ""},        // this gateway has no health-check address
	} {
		got := c.l.probeAddress(c.endpoint)
		if (c.want == "" && got.IsValid()) || (c.want != "" && got.String() != c.want) {
			t.Errorf("probeAddress(%q) with local health IP %v = %q, want %q", c.endpoint, c.l.healthIP, got, c.want)
		}
	}
}
