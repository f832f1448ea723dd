package controller

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func writeFile(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "gw.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestExampleConfigLoads(t *testing.T) {
	cfg, err := LoadGatewayConfig("../deploy/examples/gateway-c1.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Cluster.ID != "c1" || len(cfg.Remotes) != 1 || cfg.Remotes[0].ID != "c2" {
		t.Fatalf("unexpected config %+v", cfg)
	}
}

func TestLoadRefusesUnknownFieldNamingIt(t *testing.T) {
	p := writeFile(t, "cluster:\n  id: c1\n  podCIDR: [10.8.0.0/16]\n")
	_, err := LoadGatewayConfig(p)
	if err == nil || !strings.Contains(err.Error(), "podCIDR") {
		t.Fatalf("err = %v, want it to name the unknown field podCIDR", err)
	}
}

func TestLoadReportsMissingFile(t *testing.T) {
	_, err := LoadGatewayConfig(filepath.Join(t.TempDir(), "absent.yaml"))
	if err == nil || !strings.Contains(err.Error(), "absent.yaml") {
		t.Fatalf("err = %v, want it to name the file", err)
	}
}

func FuzzParseGatewayConfig(f *testing.F) {
	example, err := os.ReadFile("../deploy/examples/gateway-c1.yaml")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(example)
	globalnet, err := os.ReadFile("../deploy/examples/gateway-g1-globalnet.yaml")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(globalnet)
	esp, err := os.ReadFile("../deploy/examples/gateway-c1-esp.yaml")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(esp)
	f.Add([]byte("cluster: {id: c1, podCIDRs: [10.8.0.0/16]}\ntransport: {type: vxlan}\nremotes: [{id: c2, podCIDRs: [10.8.0.0/17], endpoint: '::1'}]\n"))
	f.Add([]byte("remotes: [{}, {id: c1}]\ntun: {mtu: -1}\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		cfg, err := ParseGatewayConfig(b, "fuzz")
		if err != nil {
			if err.Error() == "" {
				t.Fatal("empty error message")
			}
			return
		}
		// Whatever validates must validate again unchanged: defaults are
		// applied once and are themselves valid.
		again := cfg
		if err := again.Validate(); err != nil {
			t.Fatalf("a validated config fails a second validation: %v", err)
		}
	})
}

func TestGlobalnetExampleConfigLoads(t *testing.T) {
	cfg, err := LoadGatewayConfig("../deploy/examples/gateway-g1-globalnet.yaml")
	if err != nil {
		t.Fatal(err)
	}
	g := cfg.Globalnet
	if g == nil || g.GlobalCIDR != "242.1.0.0/16" || len(g.EgressPools) != 2 || len(g.Ingress) != 2 || cfg.Remotes[0].GlobalCIDR != "242.2.0.0/16" {
		t.Fatalf("unexpected Globalnet config %+v", g)
	}
}

func TestESPExampleConfigLoads(t *testing.T) {
	cfg, err := LoadGatewayConfig("../deploy/examples/gateway-c1-esp.yaml")
	if err != nil {
		t.Fatal(err)
	}
	e := cfg.Transport.ESP
	if cfg.Transport.Type != "esp" || e == nil || e.PSKFile == "" || len(e.Proposals) != 2 || cfg.Remotes[0].ESP == nil || cfg.Remotes[0].ESP.ID != "c2" {
		t.Fatalf("unexpected esp config %+v", e)
	}
}

func TestLoadRefusesMisspeltGlobalnetField(t *testing.T) {
	p := writeFile(t, "globalnet:\n  globalRange: 242.1.0.0/16\n")
	_, err := LoadGatewayConfig(p)
	if err == nil || !strings.Contains(err.Error(), "globalRange") {
		t.Fatalf("err = %v, want it to name the unknown field globalRange", err)
	}
}
