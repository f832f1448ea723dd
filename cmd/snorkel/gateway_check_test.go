package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestGatewayCheckReadsTheKeyFiles: --check must refuse what the start
// would, here a pre-shared key too short for IKE, before saying "config ok".
func TestGatewayCheckReadsTheKeyFiles(t *testing.T) {
	dir := t.TempDir()
	psk := filepath.Join(dir, "clusterset.psk")
	if err := os.WriteFile(psk, []byte("abcde\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "gateway.yaml")
	yaml := `cluster: {id: c1, podCIDRs: [10.8.0.0/16], serviceCIDRs: [10.88.0.0/16]}
transport: {type: esp, port: 0, esp: {pskFile: ` + psk + `}}
remotes:
- {id: c2, podCIDRs: [10.9.0.0/16], serviceCIDRs: [10.99.0.0/16], endpoint: 198.18.0.2}
`
	if err := os.WriteFile(cfg, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	err := runGateway([]string{"--config", cfg, "--check"})
	if err == nil {
		t.Fatal("--check passed a 5-byte pre-shared key")
	}
	for _, want := range []string{cfg, "transport.esp.pskFile", "5 bytes"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q: %v", want, err)
		}
	}
}
