package wireguard

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestWgShowReadsRunningTransport(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to create the UAPI socket under /var/run/wireguard")
	}
	wg, err := exec.LookPath("wg")
	if err != nil {
		t.Skip("wg (wireguard-tools) is not installed")
	}
	name := fmt.Sprintf("snktest%d", os.Getpid()%100000)
	sock := filepath.Join(uapiDir, name+".sock")
	p := newPair(t, func(c *Config) { c.UAPIName = name }, nil)
	sendPackets(t, p.a, hostA, hostB, 2, 300, 1)
	p.cb.waitFor(t, 2)

	out, err := exec.Command(wg, "show", name).CombinedOutput()
	if err != nil {
		t.Fatalf("wg show %s: %v\n%s", name, err, out)
	}
	t.Logf("wg show %s:\n%s", name, out)
	for _, want := range []string{
		"interface: " + name,
		"public key: " + p.keyA.Public().String(),
		fmt.Sprintf("listening port: %d", p.a.Port()),
		"peer: " + p.keyB.Public().String(),
		"allowed ips: " + cidrB.String(),
		"latest handshake:",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("wg show output lacks %q", want)
		}
	}

	if err := p.a.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Errorf("socket %s still exists after Close (stat: %v)", sock, err)
	}
	if out, err := exec.Command(wg, "show", name).CombinedOutput(); err == nil {
		t.Errorf("wg show %s succeeded after Close:\n%s", name, out)
	}
}
