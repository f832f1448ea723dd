package gateway

import (
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/snorkel-net/snorkel/transport"
)

func espConfig() Config {
	c := validConfig()
	c.Transport = TransportConfig{Type: transport.ESP, ESP: &ESPConfig{
		PSK: "0123456789abcdef", RekeyTime: "30m", IKERekeyTime: "2h", RekeyBytes: 1 << 30,
		Proposals: []string{"aes128gcm16"},
	}}
	c.Remotes[0].WireGuard = nil
	return c
}

// TestESPConfigReachesTheIKEEngine checks what the gateway tells the IKE
// engine: identities, who initiates, lifetimes and traffic selectors.
func TestESPConfigReachesTheIKEEngine(t *testing.T) {
	c := espConfig()
	s, err := c.build()
	if err != nil {
		t.Fatal(err)
	}
	cfg := s.ikeConfig([]byte("key"))
	if cfg.LocalID != "c1" || cfg.ChildRekeyTime != 30*time.Minute || cfg.IKERekeyTime != 2*time.Hour || cfg.ChildRekeyBytes != 1<<30 {
		t.Fatalf("engine config %+v", cfg)
	}
	p := cfg.Peers[0]
	want := func(ss ...string) []netip.Prefix {
		var out []netip.Prefix
		for _, v := range ss {
			out = append(out, netip.MustParsePrefix(v))
		}
		return out
	}
	if p.RemoteID != "c2" || !p.Initiate || p.Endpoint.String() != "198.18.0.2:4500" ||
		!slices.Equal(p.LocalTS, want("10.8.0.0/16", "10.88.0.0/16")) || !slices.Equal(p.RemoteTS, want("10.9.0.0/16", "10.99.0.0/16")) {
		t.Fatalf("peer config %+v", p)
	}

	// The other side of the pair waits; remotes[].esp overrides both.
	no := false
	c = espConfig()
	c.Remotes[0].ESP = &ESPRemoteConfig{ID: "gw.c2.example", Initiate: &no}
	s, err = c.build()
	if err != nil {
		t.Fatal(err)
	}
	cfg = s.ikeConfig([]byte("key"))
	if p := cfg.Peers[0]; p.RemoteID != "gw.c2.example" || p.Initiate {
		t.Fatalf("with remotes[0].esp: peer config %+v", p)
	}
}
