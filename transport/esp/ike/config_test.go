package ike

import (
	"net/netip"
	"strings"
	"testing"
	"time"
)

func TestConfigValidation(t *testing.T) {
	tests := []struct {
		name string
		edit func(c *Config)
		want string // "" when valid
	}{
		{"the base configuration", func(c *Config) {}, ""},
		{"no LocalID", func(c *Config) { c.LocalID = "" }, "ike: LocalID: empty identity; set it"},
		{"a distinguished name", func(c *Config) { c.LocalID = "CN=gw, O=x" }, "distinguished names are not supported"},
		{"a short PSK", func(c *Config) { c.PSK = []byte("short") }, "ike: PSK: 5 bytes; use at least 16"},
		{"a bad IKE proposal", func(c *Config) { c.IKEProposals = []string{"aes128gcm16-prfsha256-x25519", "3des-md5"} }, `ike: IKEProposals[1] "3des-md5": unknown algorithm "3des"`},
		{"a bad ESP proposal", func(c *Config) { c.ESPProposals = []string{"aes128-x25519"} }, "ike: ESPProposals[0]"},
		{"a negative duration", func(c *Config) { c.DPDInterval = -time.Second }, "ike: DPDInterval -1s: negative"},
		{"jitter as long as a rekey time", func(c *Config) { c.ChildRekeyTime, c.RekeyJitter = time.Minute, time.Minute }, "ike: RekeyJitter 1m0s"},
		{"negative tries", func(c *Config) { c.RetransmitTries = -1 }, "ike: RetransmitTries -1"},
		{"negative half-open limit", func(c *Config) { c.HalfOpenLimit = -1 }, "HalfOpenLimit -1: negative"},
		{"half-open limit at the cookie threshold", func(c *Config) { c.CookieThreshold, c.HalfOpenLimit = 50, 50 }, "ike: HalfOpenLimit 50: not above CookieThreshold 50"},
		{"cookie threshold above the default limit", func(c *Config) { c.CookieThreshold = DefaultHalfOpenLimit }, "raise HalfOpenLimit or lower CookieThreshold"},
		{"no peers", func(c *Config) { c.Peers = nil }, ""},
		{"no endpoint", func(c *Config) { c.Peers[0].Endpoint = netip.AddrPort{} }, "ike: Peers[0].Endpoint invalid AddrPort: want the peer's unicast address"},
		{"a multicast endpoint", func(c *Config) { c.Peers[0].Endpoint = netip.MustParseAddrPort("224.0.0.1:4500") }, "ike: Peers[0].Endpoint"},
		{"two peers at one address", func(c *Config) { c.Peers = append(c.Peers, c.Peers[0]) }, "ike: Peers[1].Endpoint 192.0.2.2:4500: address already used by Peers[0]"},
		{"a bad RemoteID", func(c *Config) { c.Peers[0].RemoteID = "keyid:#zz" }, "ike: Peers[0].RemoteID"},
		{"no LocalTS", func(c *Config) { c.Peers[0].LocalTS = nil }, "ike: Peers[0].LocalTS: empty; list the cluster CIDRs"},
		{"an invalid RemoteTS", func(c *Config) { c.Peers[0].RemoteTS = []netip.Prefix{{}} }, "ike: Peers[0].RemoteTS: invalid prefix"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := baseConfig(addrA)
			tt.edit(&c)
			_, err := NewEngine(c, newFakeDP(), netSender{}, nil)
			if tt.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err %v, want one containing %q", err, tt.want)
			}
			if strings.Contains(err.Error(), string(psk)) {
				t.Fatal("the error holds the PSK")
			}
		})
	}
}

func TestConfigDefaults(t *testing.T) {
	c := baseConfig(addrA)
	c.Peers[0].Endpoint = netip.MustParseAddrPort("[::ffff:192.0.2.2]:0")
	s, err := c.validate()
	if err != nil {
		t.Fatal(err)
	}
	if s.peers[0].endpoint != addrB {
		t.Fatalf("endpoint %v, want the mapped address unmapped and port 4500", s.peers[0].endpoint)
	}
	if s.ikeRekey != DefaultIKERekeyTime || s.childRekey != DefaultChildRekeyTime || s.jitter != DefaultChildRekeyTime/10 ||
		s.cookieThreshold != DefaultCookieThreshold || s.halfOpenLimit != DefaultHalfOpenLimit || len(s.ike) != len(DefaultIKEProposals) || len(s.esp) != len(DefaultESPProposals) {
		t.Fatalf("defaults not applied: %+v", s)
	}
}

func TestParseIdentity(t *testing.T) {
	tests := []struct {
		in   string
		typ  uint8
		data string
		back string
	}{
		{"gw.example.org", idFQDN, "gw.example.org", "gw.example.org"},
		{"@gw.example.org", idFQDN, "gw.example.org", "gw.example.org"},
		{"192.0.2.1", idIPv4Addr, "\xc0\x00\x02\x01", "192.0.2.1"},
		{"2001:db8::1", idIPv6Addr, "\x20\x01\x0d\xb8" + strings.Repeat("\x00", 11) + "\x01", "2001:db8::1"},
		{"ops@example.org", idRFC822, "ops@example.org", "ops@example.org"},
		{"keyid:#0a0b", idKeyID, "\x0a\x0b", "keyid:#0a0b"},
		{"keyid:gw-1", idKeyID, "gw-1", "keyid:#67772d31"},
	}
	for _, tt := range tests {
		id, err := parseIdentity(tt.in)
		if err != nil {
			t.Fatalf("%s: %v", tt.in, err)
		}
		if id.typ != tt.typ || string(id.data) != tt.data || id.String() != tt.back {
			t.Fatalf("%s: type %d data %q (%s), want %d %q (%s)", tt.in, id.typ, id.data, id, tt.typ, tt.data, tt.back)
		}
	}
	for _, bad := range []string{"", "keyid:", "keyid:#", "keyid:#xyz", "C=CH, O=strongSwan"} {
		if _, err := parseIdentity(bad); err == nil {
			t.Fatalf("%q accepted", bad)
		}
	}
}
