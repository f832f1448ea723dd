package globalnet

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

func validConfig(t *testing.T) Config {
	t.Helper()
	rc := &rest.Config{Host: "https://127.0.0.1:1"}
	kc, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	return Config{
		ClusterID:    "c1",
		GlobalCIDR:   netip.MustParsePrefix("242.1.0.0/16"),
		Local:        kc,
		LocalConfig:  rc,
		ClusterCIDRs: []netip.Prefix{netip.MustParsePrefix("10.8.0.0/16")},
		ServiceCIDRs: []netip.Prefix{netip.MustParsePrefix("10.88.0.0/16")},
	}
}

func TestNewRefusesBadConfigNamingTheField(t *testing.T) {
	for _, tc := range []struct {
		name, want string
		change     func(*Config)
	}{
		{"no cluster ID", "Config.ClusterID", func(c *Config) { c.ClusterID = "" }},
		{"no global CIDR", "Config.GlobalCIDR is not set", func(c *Config) { c.GlobalCIDR = netip.Prefix{} }},
		{"IPv6 global CIDR", "is not IPv4", func(c *Config) { c.GlobalCIDR = netip.MustParsePrefix("fd42::/64") }},
		{"global CIDR too small", "use a /8 to a /30", func(c *Config) { c.GlobalCIDR = netip.MustParsePrefix("242.1.0.0/31") }},
		{"global CIDR too large", "use a /8 to a /30", func(c *Config) { c.GlobalCIDR = netip.MustParsePrefix("240.0.0.0/4") }},
		{"global CIDR in Calico's range", "169.254.0.0/16", func(c *Config) { c.GlobalCIDR = netip.MustParsePrefix("169.254.0.0/16") }},
		{"no client", "Config.Local is nil", func(c *Config) { c.Local = nil }},
		{"no rest config", "Config.LocalConfig is nil", func(c *Config) { c.LocalConfig = nil }},
		{"no cluster CIDRs", "Config.ClusterCIDRs is empty", func(c *Config) { c.ClusterCIDRs = nil }},
		{"service CIDR overlaps the global CIDR", "Config.ServiceCIDRs[0] 242.1.5.0/24 overlaps Config.GlobalCIDR", func(c *Config) {
			c.ServiceCIDRs = []netip.Prefix{netip.MustParsePrefix("242.1.5.0/24")}
		}},
		{"cluster CIDR link-local", "Config.ClusterCIDRs[1] 169.254.1.0/24 overlaps", func(c *Config) {
			c.ClusterCIDRs = append(c.ClusterCIDRs, netip.MustParsePrefix("169.254.1.0/24"))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := validConfig(t)
			tc.change(&cfg)
			_, err := New(cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New = %v, want an error containing %q", err, tc.want)
			}
		})
	}
	if _, err := New(validConfig(t)); err != nil {
		t.Fatalf("New(valid config) = %v", err)
	}
}

func TestSetRemotesDropsCIDRsThatWouldBreakTheRules(t *testing.T) {
	ipam, err := New(validConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	p := netip.MustParsePrefix
	ipam.SetRemotes([]netip.Prefix{
		p("242.2.0.0/16"),   // fine
		{},                  // a remote without Globalnet
		p("242.1.128.0/17"), // overlaps this cluster's global CIDR
		p("242.2.1.0/24"),   // overlaps remote 0
		p("10.8.0.0/24"),    // overlaps the cluster CIDR
		p("fd42::/64"),      // not IPv4
		p("242.3.0.0/16"),   // fine
	})
	want := []netip.Prefix{p("242.2.0.0/16"), {}, {}, {}, {}, {}, p("242.3.0.0/16")}
	if got := ipam.remotesCopy(); !slices.Equal(got, want) {
		t.Fatalf("remotes %v, want %v", got, want)
	}
}
