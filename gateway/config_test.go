package gateway

import (
	"strings"
	"testing"
)

func validConfig() Config {
	return Config{
		Cluster: Cluster{ID: "c1", PodCIDRs: []string{"10.8.0.0/16"}, ServiceCIDRs: []string{"10.88.0.0/16"}},
		Transport: TransportConfig{Type: TransportWireGuard,
			WireGuard: &WireGuardConfig{PrivateKeyFile: "/tmp/k"}},
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
			[]string{"transport.type", `"ipsec"`, "wireguard, vxlan"}},
		{"missing transport", func(c *Config) { c.Transport.Type = "" }, []string{"transport.type", "is required"}},
		{"bad CIDR", func(c *Config) { c.Cluster.PodCIDRs = []string{"10.8.0.0/33"} }, []string{"cluster.podCIDRs[0]", "not a CIDR"}},
		{"host bits", func(c *Config) { c.Cluster.ServiceCIDRs = []string{"10.88.0.1/16"} }, []string{"cluster.serviceCIDRs[0]", "did you mean 10.88.0.0/16"}},
		{"cluster id not a DNS label", func(c *Config) { c.Cluster.ID = "C_1" }, []string{"cluster.id", "DNS-1123"}},
		{"duplicate cluster id", func(c *Config) { c.Remotes[0].ID = "c1" }, []string{"remotes[0].id", "already named by cluster.id"}},
		{"bad endpoint", func(c *Config) { c.Remotes[0].Endpoint = "gw.example" }, []string{"remotes[0].endpoint", "198.18.0.2:4500"}},
		{"missing public key", func(c *Config) { c.Remotes[0].WireGuard = nil }, []string{"remotes[0].wireguard.publicKey", "is required"}},
		{"malformed public key", func(c *Config) { c.Remotes[0].WireGuard.PublicKey = "abc" }, []string{"remotes[0].wireguard.publicKey", "base64"}},
		{"missing key file", func(c *Config) { c.Transport.WireGuard = nil }, []string{"transport.wireguard.privateKeyFile"}},
		{"port out of range", func(c *Config) { c.Transport.Port = 70000 }, []string{"transport.port", "70000"}},
		{"vni too large", func(c *Config) {
			c.Transport = TransportConfig{Type: TransportVXLAN, VXLAN: &VXLANLocalConfig{VNI: 1 << 24}}
		}, []string{"transport.vxlan.vni", "24 bits"}},
		{"no remotes", func(c *Config) { c.Remotes = nil }, []string{"remotes", "at least one"}},
		{"tun name too long", func(c *Config) { c.TUN.Name = "a-very-long-interface" }, []string{"tun.name", "15"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := validConfig()
			tc.mutate(&c)
			err := c.Validate()
			if err == nil {
				t.Fatal("Validate accepted a bad config")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
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
