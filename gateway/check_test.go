package gateway

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/snorkel-net/snorkel/transport"
	"github.com/snorkel-net/snorkel/transport/udp"
)

func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

const (
	testWGKey = "yAnz5TF+lXXJte14tji3zlMNq+hd2rYUIgJBgB3fBmk=\n"
	testPSK   = "FpCyhws9cxwWoV4xELtfJvjJN+zQVRPISllRWgeopVE=\n"
)

func TestCheckPassesAGoodConfigAndLeavesNoTrace(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		cfg  func() Config
	}{
		{"wireguard with a key file still to be generated", func() Config {
			c := validConfig()
			c.Transport.WireGuard.PrivateKeyFile = filepath.Join(dir, "new", "wg.key")
			c.Remotes[0].WireGuard.PresharedKeyFile = writeFile(t, dir, "wg.psk", testPSK)
			return c
		}},
		{"wireguard with a key file", func() Config {
			c := validConfig()
			c.Transport.WireGuard.PrivateKeyFile = writeFile(t, dir, "wg.key", testWGKey)
			return c
		}},
		{"esp with a psk file", func() Config {
			c := espConfig()
			c.Transport.ESP.PSK = ""
			c.Transport.ESP.PSKFile = writeFile(t, dir, "esp.psk", testPSK)
			return c
		}},
		{"vxlan", func() Config {
			c := validConfig()
			c.Transport = TransportConfig{Type: transport.VXLAN}
			c.Remotes[0].WireGuard = nil
			return c
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := tc.cfg()
			c.Transport.Port = FreeUDPPort(t)
			c.MetricsAddress = "127.0.0.1:0"
			if err := c.Check(); err != nil {
				t.Fatalf("Check: %v", err)
			}
			if _, err := os.Stat(filepath.Join(dir, "new")); !os.IsNotExist(err) {
				t.Errorf("Check created the key directory: %v", err)
			}
			conn, err := udp.Open(uint16(c.Transport.Port))
			if err != nil {
				t.Fatalf("the port is held after Check: %v", err)
			}
			conn.Close()
		})
	}
}

func TestCheckNamesFieldAndFix(t *testing.T) {
	dir := t.TempDir()
	shortPSK := writeFile(t, dir, "short.psk", "abcde\n")
	garbage := writeFile(t, dir, "garbage.key", "not a key\n")
	missing := filepath.Join(dir, "missing")
	busy, err := net.ListenPacket("udp4", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	busyTCP, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busyTCP.Close()
	esp := func(pskFile string) func(*Config) {
		return func(c *Config) {
			*c = espConfig()
			c.Transport.ESP.PSK = ""
			c.Transport.ESP.PSKFile = pskFile
		}
	}
	for _, tc := range []struct {
		name   string
		mutate func(*Config)
		want   []string // every fragment must appear in the error
	}{
		{"psk file of 5 bytes", esp(shortPSK),
			[]string{"transport.esp.pskFile", shortPSK, "5 bytes", "at least 16"}},
		{"psk file missing", esp(missing),
			[]string{"transport.esp.pskFile", "cannot read", "fix the path"}},
		{"psk file unreadable", esp(dir),
			[]string{"transport.esp.pskFile", "cannot read", "readable"}},
		{"inline psk of 5 bytes", func(c *Config) { *c = espConfig(); c.Transport.ESP.PSK = "abcde" },
			[]string{"transport.esp.psk", "5 bytes"}},
		{"private key file holds no key", func(c *Config) { c.Transport.WireGuard.PrivateKeyFile = garbage },
			[]string{"transport.wireguard.privateKeyFile", garbage, "base64 key", "wg genkey"}},
		{"private key file unreadable", func(c *Config) { c.Transport.WireGuard.PrivateKeyFile = dir },
			[]string{"transport.wireguard.privateKeyFile", "cannot read", "readable"}},
		{"preshared key file holds no key", func(c *Config) { c.Remotes[0].WireGuard.PresharedKeyFile = garbage },
			[]string{"remotes[0].wireguard.presharedKeyFile", garbage, "wg genpsk"}},
		{"preshared key file missing", func(c *Config) { c.Remotes[0].WireGuard.PresharedKeyFile = missing },
			[]string{"remotes[0].wireguard.presharedKeyFile", "cannot read", "fix the path"}},
		{"UDP port in use", func(c *Config) { c.Transport.Port = busy.LocalAddr().(*net.UDPAddr).Port },
			[]string{"transport.port", "already in use", "choose another port"}},
		{"metrics address in use", func(c *Config) { c.MetricsAddress = busyTCP.Addr().String() },
			[]string{"metricsAddress", busyTCP.Addr().String(), "choose another address"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := validConfig()
			c.Transport.WireGuard.PrivateKeyFile = filepath.Join(t.TempDir(), "wg.key")
			tc.mutate(&c)
			if c.Transport.Port == 0 {
				c.Transport.Port = FreeUDPPort(t)
			}
			err := c.Check()
			if err == nil {
				t.Fatal("Check passed")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q:\n%v", w, err)
				}
			}
		})
	}
}

// TestStartReadsKeysAsCheckDoes holds the start to Check's judgement: a
// key Check refuses, the start refuses with the same words.
func TestStartReadsKeysAsCheckDoes(t *testing.T) {
	c := espConfig()
	c.Transport.ESP.PSK = ""
	c.Transport.ESP.PSKFile = writeFile(t, t.TempDir(), "short.psk", "abcde\n")
	c.Transport.Port = FreeUDPPort(t)
	checkErr := c.Check()
	if checkErr == nil {
		t.Fatal("Check passed a 5-byte psk file")
	}
	g, err := New(c, Options{})
	if err == nil {
		g.Close()
		t.Fatal("New started with a 5-byte psk file")
	}
	if err.Error() != checkErr.Error() {
		t.Errorf("New: %v\nCheck: %v\nwant the same error", err, checkErr)
	}
}
