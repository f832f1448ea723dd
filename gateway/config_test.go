package gateway

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/snorkel-net/snorkel/natengine"
	"github.com/snorkel-net/snorkel/transport"
)

// keyDir holds the WireGuard private key of validConfig, which a gateway
// that starts generates; TestMain removes it.
var keyDir string

func TestMain(m *testing.M) {
	var err error
	if keyDir, err = os.MkdirTemp("", "snorkel-gateway-test-"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(keyDir)
	os.Exit(code)
}

func validConfig() Config {
	return Config{
		Cluster: Cluster{ID: "c1", PodCIDRs: []string{"10.8.0.0/16"}, ServiceCIDRs: []string{"10.88.0.0/16"}},
		Transport: TransportConfig{Type: transport.WireGuard,
			WireGuard: &WireGuardConfig{PrivateKeyFile: filepath.Join(keyDir, "k")}},
		Remotes: []Remote{{
			ID: "c2", PodCIDRs: []string{"10.9.0.0/16"}, ServiceCIDRs: []string{"10.99.0.0/16"},
			Endpoint:  "198.18.0.2",
			WireGuard: &WireGuardRemoteConfig{PublicKey: "Rk5kWjB0dnpKd2hGbU9XYk1hVnJHdXV4SlN6UlZ0Qzc="},
		}},
	}
}

func TestValidConfigPassesAndGetsDefaults(t *testing.T) {
	c := validConfig()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if c.Transport.Port != DefaultPort || c.UnderlayMTU != DefaultUnderlayMTU || c.TUN.Name != DefaultTUNName {
		t.Fatalf("defaults not applied: %+v", c)
	}
	s, _ := c.build()
	if got := s.remotes[0].endpoint.String(); got != "198.18.0.2:4500" {
		t.Fatalf("endpoint without port = %s, want default port 4500", got)
	}
}

func TestValidateNamesFieldAndFix(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(*Config)
		want   []string // every fragment must appear in the error
	}{
		{"overlapping pod CIDRs point to Globalnet", func(c *Config) { c.Remotes[0].PodCIDRs = []string{"10.8.0.0/16"} },
			[]string{"remotes[0].podCIDRs[0]", `cluster "c2"`, `cluster "c1"`, "Globalnet"}},
		{"unknown transport lists the valid ones", func(c *Config) { c.Transport.Type = "ipsec" },
			[]string{"transport.type", `"ipsec"`, "wireguard, esp, vxlan"}},
		{"missing transport", func(c *Config) { c.Transport.Type = "" }, []string{"transport.type", "is required"}},
		{"bad CIDR", func(c *Config) { c.Cluster.PodCIDRs = []string{"10.8.0.0/33"} }, []string{"cluster.podCIDRs[0]", "not a CIDR"}},
		{"host bits", func(c *Config) { c.Cluster.ServiceCIDRs = []string{"10.88.0.1/16"} }, []string{"cluster.serviceCIDRs[0]", "did you mean 10.88.0.0/16"}},
		{"cluster id not a DNS label", func(c *Config) { c.Cluster.ID = "C_1" }, []string{"cluster.id", "DNS-1123"}},
		{"duplicate cluster id", func(c *Config) { c.Remotes[0].ID = "c1" }, []string{"remotes[0].id", "already named by cluster.id"}},
		{"bad endpoint", func(c *Config) { c.Remotes[0].Endpoint = "gw.example" }, []string{"remotes[0].endpoint", "198.18.0.2:4500"}},
		{"unspecified endpoint", func(c *Config) { c.Remotes[0].Endpoint = "0.0.0.0:4500" }, []string{"remotes[0].endpoint", "not a unicast address"}},
		{"missing public key", func(c *Config) { c.Remotes[0].WireGuard = nil }, []string{"remotes[0].wireguard.publicKey", "is required"}},
		{"malformed public key", func(c *Config) { c.Remotes[0].WireGuard.PublicKey = "abc" }, []string{"remotes[0].wireguard.publicKey", "base64"}},
		{"missing key file", func(c *Config) { c.Transport.WireGuard = nil }, []string{"transport.wireguard.privateKeyFile"}},
		{"port out of range", func(c *Config) { c.Transport.Port = 70000 }, []string{"transport.port", "70000"}},
		{"vni too large", func(c *Config) {
			c.Transport = TransportConfig{Type: transport.VXLAN, VXLAN: &VXLANLocalConfig{VNI: 1 << 24}}
		}, []string{"transport.vxlan.vni", "24 bits"}},
		{"no remotes", func(c *Config) { c.Remotes = nil }, []string{"remotes", "at least one"}},
		{"esp without its section", func(c *Config) { c.Transport = TransportConfig{Type: transport.ESP} }, []string{"transport.esp", "psk or pskFile"}},
		{"esp without a key", func(c *Config) { c.Transport = TransportConfig{Type: transport.ESP, ESP: &ESPConfig{}} }, []string{"transport.esp.psk", "is required"}},
		{"esp with two keys", func(c *Config) {
			c.Transport = TransportConfig{Type: transport.ESP, ESP: &ESPConfig{PSK: "0123456789abcdef", PSKFile: "/etc/psk"}}
		}, []string{"transport.esp.psk", "keep one"}},
		{"esp key too short", func(c *Config) {
			c.Transport = TransportConfig{Type: transport.ESP, ESP: &ESPConfig{PSK: "short"}}
		}, []string{"transport.esp.psk", "at least 16"}},
		{"esp proposal unknown", func(c *Config) {
			c.Transport = TransportConfig{Type: transport.ESP, ESP: &ESPConfig{PSK: "0123456789abcdef", Proposals: []string{"des-md5"}}}
		}, []string{"transport.esp.proposals[0]", `"des-md5"`}},
		{"esp rekey time not a duration", func(c *Config) {
			c.Transport = TransportConfig{Type: transport.ESP, ESP: &ESPConfig{PSK: "0123456789abcdef", RekeyTime: "hourly"}}
		}, []string{"transport.esp.rekeyTime", "1h"}},
		{"tun name too long", func(c *Config) { c.TUN.Name = "a-very-long-interface" }, []string{"tun.name", "15"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := validConfig()
			tc.mutate(&c)
			wantInvalid(t, c, tc.want)
		})
	}
}

// wantInvalid fails t unless c is refused with an error containing every
// fragment of want.
func wantInvalid(t *testing.T, c Config, want []string) {
	t.Helper()
	err := c.Validate()
	if err == nil {
		t.Fatal("Validate accepted a bad config")
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not contain %q", err, w)
		}
	}
}

func TestValidateReportsEveryProblemAtOnce(t *testing.T) {
	c := validConfig()
	c.Cluster.ID = ""
	c.Transport.Type = "gre"
	c.Remotes[0].Endpoint = ""
	err := c.Validate()
	if err == nil {
		t.Fatal("accepted")
	}
	for _, f := range []string{"cluster.id", "transport.type", "remotes[0].endpoint"} {
		if !strings.Contains(err.Error(), f) {
			t.Errorf("error does not mention %s:\n%v", f, err)
		}
	}
}

// globalnetConfig is validConfig with Globalnet on and the remote's pod and
// service CIDRs the same as the local ones, as Globalnet allows.
func globalnetConfig() Config {
	c := validConfig()
	c.TUN.Address = "10.8.0.1"
	c.Globalnet = &Globalnet{
		GlobalCIDR: "242.1.0.0/16",
		EgressPools: []EgressPool{
			{Name: "blue", Kind: PoolKindNamespace, Members: []string{"10.8.1.0/24"}},
			{Name: "blue-db", Kind: PoolKindPodSelector, Members: []string{"10.8.1.7"}, GlobalIPs: GlobalIPs{IPs: []string{"242.1.0.100"}}},
		},
		Ingress: []GlobalIngress{
			{Name: "web", Kind: IngressKindService, GlobalIP: "242.1.0.200", LocalIP: "10.88.0.10"},
			{Name: "db-0", Kind: IngressKindHeadlessPod, GlobalIP: "242.1.0.201", LocalIP: "10.8.2.5"},
		},
	}
	c.Remotes[0].PodCIDRs = c.Cluster.PodCIDRs
	c.Remotes[0].ServiceCIDRs = c.Cluster.ServiceCIDRs
	c.Remotes[0].GlobalCIDR = "242.2.0.0/16"
	return c
}

func TestGlobalnetResolvesRules(t *testing.T) {
	c := globalnetConfig()
	s, err := c.build()
	if err != nil {
		t.Fatal(err)
	}
	r := s.globalnet.rules
	a := netip.MustParseAddr
	var egress []netip.Addr
	for i := 1; i <= DefaultClusterEgressIPs; i++ {
		egress = append(egress, netip.AddrFrom4([4]byte{242, 1, 0, byte(i)}))
	}
	if !slices.Equal(r.ClusterEgress, egress) {
		t.Errorf("cluster egress %v, want the first %d addresses of 242.1.0.0/16: %v", r.ClusterEgress, DefaultClusterEgressIPs, egress)
	}
	// One counted address comes from the top of the global CIDR, as the
	// controller's IPAM hands it out: the same allocator serves both.
	if len(r.Pools) != 2 || !slices.Equal(r.Pools[0].IPs, []netip.Addr{a("242.1.255.254")}) || r.Pools[0].Kind != natengine.PoolNamespace {
		t.Errorf("pool blue %+v, want one counted IP from the top of the global CIDR, 242.1.255.254", r.Pools[0])
	}
	if !slices.Equal(r.Pools[1].IPs, []netip.Addr{a("242.1.0.100")}) || r.Pools[1].Kind != natengine.PoolPodSelector ||
		!slices.Equal(r.Pools[1].Members, []netip.Prefix{netip.MustParsePrefix("10.8.1.7/32")}) {
		t.Errorf("pool blue-db %+v, want member 10.8.1.7/32 and IP 242.1.0.100", r.Pools[1])
	}
	want := []natengine.Ingress{
		{Name: "web", Kind: natengine.IngressService, Global: a("242.1.0.200"), Local: a("10.88.0.10")},
		{Name: "db-0", Kind: natengine.IngressHeadlessPod, Global: a("242.1.0.201"), Local: a("10.8.2.5")},
	}
	if !slices.Equal(r.Ingress, want) {
		t.Errorf("ingress %+v, want %+v", r.Ingress, want)
	}
	if r.Global != netip.MustParsePrefix("242.1.0.0/16") || !slices.Equal(r.Remotes, []netip.Prefix{netip.MustParsePrefix("242.2.0.0/16")}) {
		t.Errorf("global %v remotes %v", r.Global, r.Remotes)
	}
	if !slices.Equal(s.remotes[0].cidrs, r.Remotes) {
		t.Errorf("remote c2 routes %v, want only its global CIDR", s.remotes[0].cidrs)
	}
	if c.Globalnet.Supernet != DefaultSupernet || *c.Globalnet.ClusterEgress.NumberOfIPs != DefaultClusterEgressIPs {
		t.Errorf("defaults not applied: %+v", c.Globalnet)
	}
}

func TestGlobalnetTranslatesTheTUNAddressOutsideThePodCIDRs(t *testing.T) {
	c := globalnetConfig()
	c.TUN.Address = "192.168.50.1"
	s, err := c.build()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(s.globalnet.rules.Local, netip.MustParsePrefix("192.168.50.1/32")) {
		t.Errorf("Local %v lacks the TUN address: ICMP errors of the node would leave untranslated", s.globalnet.rules.Local)
	}
}

func TestGlobalnetExplicitClusterEgressAndZero(t *testing.T) {
	c := globalnetConfig()
	c.Globalnet.ClusterEgress = GlobalIPs{IPs: []string{"242.1.3.1", "242.1.3.2"}}
	s, err := c.build()
	if err != nil {
		t.Fatal(err)
	}
	if got := s.globalnet.rules.ClusterEgress; len(got) != 2 || got[0] != netip.MustParseAddr("242.1.3.1") {
		t.Errorf("cluster egress %v, want the two listed", got)
	}
	if got := s.globalnet.rules.Pools[0].IPs; got[0] != netip.MustParseAddr("242.1.255.254") {
		t.Errorf("counted pool got %v; a single counted address is the highest free one, 242.1.255.254", got)
	}
	zero := 0
	c = globalnetConfig()
	c.Globalnet.ClusterEgress = GlobalIPs{NumberOfIPs: &zero}
	if s, err = c.build(); err != nil {
		t.Fatal(err)
	}
	if len(s.globalnet.rules.ClusterEgress) != 0 {
		t.Errorf("numberOfIPs 0 gave %v", s.globalnet.rules.ClusterEgress)
	}
}

func TestGlobalnetValidateNamesFieldAndFix(t *testing.T) {
	n := func(v int) *int { return &v }
	for _, tc := range []struct {
		name   string
		mutate func(*Config)
		want   []string
	}{
		{"global IP outside the global CIDR", func(c *Config) { c.Globalnet.Ingress[0].GlobalIP = "242.2.0.5" },
			[]string{"globalnet.ingress[0].globalIP", "outside globalnet.globalCIDR 242.1.0.0/16"}},
		{"pool IP outside the global CIDR", func(c *Config) { c.Globalnet.EgressPools[1].IPs = []string{"10.8.0.9"} },
			[]string{"globalnet.egressPools[1].ips[0]", "outside globalnet.globalCIDR"}},
		{"same-kind pools overlap", func(c *Config) {
			c.Globalnet.EgressPools[1].Kind = PoolKindNamespace
		}, []string{"globalnet.egressPools[1].members", "10.8.1.7/32 overlaps 10.8.1.0/24", `pool "blue"`}},
		{"pools share an IP", func(c *Config) { c.Globalnet.EgressPools[0].GlobalIPs = GlobalIPs{IPs: []string{"242.1.0.100"}} },
			[]string{"globalnet.egressPools[1].ips[0]", "242.1.0.100 is already globalnet.egressPools[0].ips[0]"}},
		{"global CIDR in 169.254.0.0/16", func(c *Config) {
			c.Globalnet.Supernet = "169.254.0.0/16"
			c.Globalnet.GlobalCIDR = "169.254.0.0/24"
		}, []string{"globalnet.supernet", "globalnet.globalCIDR", "169.254.0.0/16", "Calico"}},
		{"pod CIDR in 169.254.0.0/16", func(c *Config) { c.Cluster.PodCIDRs = []string{"169.254.0.0/17"} },
			[]string{"cluster.podCIDRs[0]", "Calico"}},
		{"global CIDRs of two clusters overlap", func(c *Config) { c.Remotes[0].GlobalCIDR = "242.1.128.0/17" },
			[]string{"remotes[0].globalCIDR", "overlaps globalnet.globalCIDR 242.1.0.0/16"}},
		{"remote without global CIDR", func(c *Config) { c.Remotes[0].GlobalCIDR = "" },
			[]string{"remotes[0].globalCIDR", `remote "c2" has no globalCIDR`}},
		{"global CIDR outside the supernet", func(c *Config) { c.Globalnet.GlobalCIDR = "100.64.0.0/16" },
			[]string{"globalnet.globalCIDR", "outside globalnet.supernet 242.0.0.0/8"}},
		{"global CIDR overlaps the pod CIDR", func(c *Config) {
			c.Globalnet.Supernet = "10.0.0.0/8"
			c.Globalnet.GlobalCIDR = "10.8.0.0/16"
		}, []string{"globalnet.globalCIDR", "overlaps this cluster's own CIDR 10.8.0.0/16"}},
		{"missing global CIDR", func(c *Config) { c.Globalnet.GlobalCIDR = "" }, []string{"globalnet.globalCIDR", "is required"}},
		{"IPv6 global CIDR", func(c *Config) { c.Globalnet.GlobalCIDR = "fd00::/64" }, []string{"globalnet.globalCIDR", "IPv4 only"}},
		{"too many cluster egress IPs", func(c *Config) { c.Globalnet.ClusterEgress.NumberOfIPs = n(21) },
			[]string{"globalnet.clusterEgress.numberOfIPs", "0 to 20"}},
		{"both listed and counted", func(c *Config) {
			c.Globalnet.ClusterEgress = GlobalIPs{IPs: []string{"242.1.9.9"}, NumberOfIPs: n(2)}
		}, []string{"globalnet.clusterEgress", "not both"}},
		{"pool with no IPs", func(c *Config) { c.Globalnet.EgressPools[0].NumberOfIPs = n(0) },
			[]string{"globalnet.egressPools[0].numberOfIPs", "1 to 20"}},
		{"unknown pool kind", func(c *Config) { c.Globalnet.EgressPools[0].Kind = "label" },
			[]string{"globalnet.egressPools[0].kind", "namespace or podSelector"}},
		{"pool member outside the pod CIDRs", func(c *Config) { c.Globalnet.EgressPools[0].Members = []string{"10.88.0.0/24"} },
			[]string{"globalnet.egressPools[0].members[0]", "not inside cluster.podCIDRs"}},
		{"service ingress to a pod address", func(c *Config) { c.Globalnet.Ingress[0].LocalIP = "10.8.0.20" },
			[]string{"globalnet.ingress[0].localIP", "cluster.serviceCIDRs"}},
		{"unknown ingress kind", func(c *Config) { c.Globalnet.Ingress[1].Kind = "pod" },
			[]string{"globalnet.ingress[1].kind", "service or headlessPod"}},
		{"duplicate ingress name", func(c *Config) { c.Globalnet.Ingress[1].Name = "web" },
			[]string{"globalnet.ingress[1].name", "already the name of globalnet.ingress[0]"}},
		{"two global IPs for one pod", func(c *Config) {
			c.Globalnet.Ingress[1].LocalIP = "10.88.0.10"
			c.Globalnet.Ingress[1].Kind = IngressKindService
		},
			[]string{"globalnet.ingress[1].localIP", "already the local address of globalnet.ingress[0]"}},
		{"global CIDR of a remote with Globalnet off", func(c *Config) {
			c.Globalnet = nil
			c.Remotes[0].PodCIDRs = []string{"10.9.0.0/16"}
			c.Remotes[0].ServiceCIDRs = []string{"10.99.0.0/16"}
		}, []string{"remotes[0].globalCIDR", "Globalnet is off"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := globalnetConfig()
			tc.mutate(&c)
			wantInvalid(t, c, tc.want)
		})
	}
}

func TestGlobalnetAllowsOverlappingClusterCIDRsAndValidatesTwice(t *testing.T) {
	c := globalnetConfig()
	if err := c.Validate(); err != nil {
		t.Fatalf("overlapping pod and service CIDRs refused with Globalnet on: %v", err)
	}
	if err := c.Validate(); err != nil {
		t.Fatalf("second validation: %v", err)
	}
	c.Remotes[0].PodCIDRs, c.Remotes[0].ServiceCIDRs = nil, nil
	if err := c.Validate(); err != nil {
		t.Fatalf("a remote with only a global CIDR refused: %v", err)
	}
}

// TestGlobalnetCountsAroundListedAddresses checks that counted addresses
// come from the controller's allocator after the listed ones are taken: the
// cluster egress block moves past a listed ingress address instead of
// colliding with it.
func TestGlobalnetCountsAroundListedAddresses(t *testing.T) {
	c := globalnetConfig()
	c.Globalnet.Ingress[0].GlobalIP = "242.1.0.3"
	s, err := c.build()
	if err != nil {
		t.Fatal(err)
	}
	var want []netip.Addr
	for i := 4; i < 4+DefaultClusterEgressIPs; i++ {
		want = append(want, netip.AddrFrom4([4]byte{242, 1, 0, byte(i)}))
	}
	if got := s.globalnet.rules.ClusterEgress; !slices.Equal(got, want) {
		t.Errorf("cluster egress %v, want the first free block of %d after 242.1.0.3: %v", got, DefaultClusterEgressIPs, want)
	}
}

// TestSpecValidateNamesFieldAndFix checks that a Spec built in code, as
// the agent builds one, is judged with the file's field names.
func TestSpecValidateNamesFieldAndFix(t *testing.T) {
	c := validConfig()
	s, err := c.Compile()
	if err != nil {
		t.Fatal(err)
	}
	s.Remotes[0].Endpoint = netip.AddrPort{}
	s.Remotes[0].PodCIDRs = append(s.Remotes[0].PodCIDRs, netip.MustParsePrefix("10.8.0.0/16"))
	err = s.Validate()
	for _, want := range []string{"remotes[0].endpoint: is not set", "remotes[0].podCIDRs[1]", "Globalnet"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate: %v; want it to say %q", err, want)
		}
	}
}
