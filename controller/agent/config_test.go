package agent

import (
	"context"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/snorkel-net/snorkel/controller/api"
	"github.com/snorkel-net/snorkel/gateway"
)

// nopDataplane accepts everything; New needs a Dataplane but these tests
// never run the agent.
type nopDataplane struct{}

func (nopDataplane) Apply(context.Context, *gateway.Spec) error { return nil }
func (nopDataplane) Status() []RemoteStatus                     { return nil }

func validConfig() Config {
	return Config{
		Member: &api.AgentConfig{
			ClusterID: "c1", BrokerURL: "https://127.0.0.1:6443", BrokerNamespace: "submariner-k8s-broker", BrokerToken: "token",
			PSK: "0123456789abcdef0123", CableDriver: "wireguard", ClusterCIDRs: []string{"10.8.0.0/16"}, ServiceCIDRs: []string{"10.88.0.0/16"},
		},
		LocalConfig:   &rest.Config{Host: "https://127.0.0.1:6444"},
		Identity:      "node-a",
		PrivateIP:     "172.18.0.5",
		BackendConfig: map[string]string{BackendConfigPublicKey: keyA},
		Dataplane:     nopDataplane{},
	}
}

func TestNewRefusesBadConfigsNamingTheField(t *testing.T) {
	tests := []struct {
		name string
		mod  func(*Config)
		want string
	}{
		{"no agent configuration", func(c *Config) { c.Member = nil }, "Config.Member is nil"},
		{"unknown cable driver", func(c *Config) { c.Member.CableDriver = "ipsec" }, "Config.Member.CableDriver"},
		{"no private IP", func(c *Config) { c.PrivateIP = "" }, "Config.PrivateIP"},
		{"bad public IP", func(c *Config) { c.PublicIP = "gateway.example" }, "Config.PublicIP"},
		{"wireguard without a public key", func(c *Config) { c.BackendConfig = nil }, `Config.BackendConfig["publicKey"]`},
		{"esp without a PSK", func(c *Config) { c.Member.CableDriver, c.Member.PSK = "esp", "" }, "Config.Member.PSK"},
		{"no data plane", func(c *Config) { c.Dataplane = nil }, "Config.Dataplane"},
		{"an identity that cannot name an object", func(c *Config) { c.Identity = "Node_A" }, "Config.Identity"},
		{"renew deadline beyond the lease", func(c *Config) { c.Election.RenewDeadline = 10 * time.Second }, "Config.Election"},
		{"a lease of a fraction of a second, which a Lease cannot record", func(c *Config) { c.Election.LeaseDuration = 2500 * time.Millisecond }, "whole number of seconds"},
		{"status refreshed too rarely", func(c *Config) { c.StatusInterval = time.Minute }, "Config.StatusInterval"},
		{"no local API", func(c *Config) { c.LocalConfig = nil }, "Config.LocalConfig"},
		{"no CIDRs", func(c *Config) { c.Member.ServiceCIDRs = nil }, "--servicecidr"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := validConfig()
			tc.mod(&c)
			_, err := New(c)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("New: %v, want an error naming %s", err, tc.want)
			}
		})
	}
}

func TestNewAppliesDefaultsAndKeepsTheCallersConfig(t *testing.T) {
	c := validConfig()
	c.Member.CableDriver = "WireGuard"
	a, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	if c.Member.CableDriver != "WireGuard" {
		t.Errorf("New changed the caller's Member.CableDriver to %q", c.Member.CableDriver)
	}
	got := a.cfg
	if got.Namespace != api.AgentNamespace || got.Port != gateway.DefaultPort || got.Hostname != "node-a" ||
		got.Election.LeaseDuration != DefaultLeaseDuration || got.StatusInterval != DefaultStatusInterval || got.Member.CableDriver != "wireguard" {
		t.Errorf("defaults not applied: %+v", got)
	}
	s := a.spec
	if s.CableName != "submariner-cable-c1-172-18-0-5" || s.Backend != "wireguard" || s.BackendConfig[BackendConfigUDPPort] != "4500" ||
		s.BackendConfig[BackendConfigPublicKey] != keyA || s.NATEnabled || strings.Join(s.Subnets, ",") != "10.8.0.0/16,10.88.0.0/16" {
		t.Errorf("local Endpoint spec %+v", s)
	}
}

func TestPublicIPAnnotationIsReadAsSubmarinerWritesIt(t *testing.T) {
	for _, tc := range []struct {
		value, want string
		ok          bool
	}{
		{"ipv4:198.51.100.7", "198.51.100.7", true},
		{"198.51.100.7", "", false},
		{"dns:gw.example.com", "", false},
		{"ipv4:2001:db8::7", "", false},
		{"ipv4:", "", false},
	} {
		got, err := ParsePublicIPAnnotation(tc.value)
		if got != tc.want || (err == nil) != tc.ok {
			t.Errorf("ParsePublicIPAnnotation(%q) = %q, %v; want %q (ok %v)", tc.value, got, err, tc.want, tc.ok)
		}
	}
}
