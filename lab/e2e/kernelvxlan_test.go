package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/snorkel-net/snorkel/gateway"
	"github.com/snorkel-net/snorkel/lab"
	"github.com/snorkel-net/snorkel/lab/topo"
	"github.com/snorkel-net/snorkel/transport"
)

// The kernel VTEP that stands in for c2's gateway. Its MAC is fixed so
// that a Snorkel config can name it.
const (
	kernelVTEP = "vx0"
	kernelMAC  = "02:6b:76:78:00:02"
)

// TestKernelVXLANInterop replaces c2's Snorkel gateway with a Linux kernel
// vxlan device and checks that pods on both sides still reach each other,
// with c1's Snorkel gateway speaking VXLAN to the kernel.
func TestKernelVXLANInterop(t *testing.T) {
	needRoot(t)
	e := upLab(t, transport.VXLAN, "k")
	e.replaceC2WithKernelVTEP(t)

	t.Run("kernel_speaks_first_and_snorkel_answers_its_arp", func(t *testing.T) {
		// The kernel's first frame is an ARP request for the c1 pod, the
		// next hop of its on-link route; Snorkel answers it and learns the
		// kernel's MAC from it.
		e.pingOK(t, e.c2Pod, c2PodName, e.c1IP)
		out, err := e.c2.Run(t.Context(), "ip", "neigh", "show", e.c1IP.String(), "dev", kernelVTEP)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(out), "lladdr") {
			t.Errorf("c2's node has no resolved neighbour for %s on %s (ARP unanswered): %q", e.c1IP, kernelVTEP, out)
		}
		e.pingOK(t, e.c1Pod, c1PodName, e.c2IP)
		e.bulkBothWays(t, 5101)
	})

	t.Run("snorkel_speaks_first_with_the_kernel_mac_configured", func(t *testing.T) {
		// A frame for a pod behind a kernel VTEP must carry the VTEP's MAC:
		// Linux does not forward an IP packet that arrived in a broadcast
		// frame, which is what Snorkel sends before it has learned a MAC.
		// A fresh c1 gateway that is told the MAC can speak first.
		e.restartC1WithRemoteMAC(t, kernelMAC)
		if _, err := e.c2.Run(t.Context(), "ip", "neigh", "flush", "dev", kernelVTEP); err != nil {
			t.Fatal(err)
		}
		e.pingOK(t, e.c1Pod, c1PodName, e.c2IP)
		e.pingOK(t, e.c2Pod, c2PodName, e.c1IP)
		e.bulkBothWays(t, 5201)
	})

	if rx := e.status(t, e.c1).Remotes[0].RxPackets; rx == 0 {
		t.Error("c1 gateway received nothing from c2: the traffic did not cross it")
	}
}

func (e *env) pingOK(t *testing.T, from *topo.NS, fromName string, to netip.Addr) {
	t.Helper()
	if unanswered, out := pingEach(t.Context(), from, to, 3); len(unanswered) > 0 {
		t.Errorf("ping %s → %s: echo requests %v of 3 unanswered:\n%s", fromName, to, unanswered, out)
	}
}

// bulkBothWays sends 16 MiB each way between the c1 and c2 pods on ports
// port and port+1, content checked.
func (e *env) bulkBothWays(t *testing.T, port uint16) {
	t.Helper()
	const size = 16 << 20
	ctx, cancel := context.WithTimeout(t.Context(), settle)
	defer cancel()
	if err := transferTCP(ctx, e.c1Pod, e.c2Pod, netip.AddrPortFrom(e.c2IP, port), size, 11); err != nil {
		t.Errorf("%s → %s: %v", c1PodName, c2PodName, err)
	}
	if err := transferTCP(ctx, e.c2Pod, e.c1Pod, netip.AddrPortFrom(e.c1IP, port+1), size, 12); err != nil {
		t.Errorf("%s → %s: %v", c2PodName, c1PodName, err)
	}
}

// gatewayProcess returns the running gateway in a node's namespace: the
// only process the lab starts there.
func (e *env) gatewayProcess(t *testing.T, gw *topo.NS) *topo.Process {
	t.Helper()
	for _, p := range e.lab.Topo.Processes() {
		if p.NS == gw.Name() && p.Alive() {
			return p
		}
	}
	t.Fatalf("no gateway process running in %s", gw)
	return nil
}

// replaceC2WithKernelVTEP stops c2's gateway and puts a kernel vxlan
// device in its place, speaking to c1's gateway with Snorkel's VNI and
// port, with on-link routes to c1's CIDRs through it.
func (e *env) replaceC2WithKernelVTEP(t *testing.T) {
	t.Helper()
	if err := e.gatewayProcess(t, e.c2).Stop(settle); err != nil {
		t.Fatal(err)
	}
	// The gateway removes its TUN device on the way out; its routes for
	// c1's CIDRs go with it and make room for the kernel's.
	waitUntil(t, settle, "c2's TUN device to go", func() error {
		if e.c2.HasLink(e.tun("c2")) {
			return fmt.Errorf("%s still exists", e.tun("c2"))
		}
		return nil
	})
	c1, c2 := e.lab.Plan.Cluster("c1"), e.lab.Plan.Cluster("c2")
	ctx := t.Context()
	if _, err := e.c2.Run(ctx, "ip", "link", "add", kernelVTEP, "address", kernelMAC, "type", "vxlan",
		"id", fmt.Sprint(gateway.DefaultVNI), "dstport", fmt.Sprint(gateway.DefaultPort),
		"local", c2.Gateway.UnderlayIP.Addr().String(), "remote", c1.Gateway.UnderlayIP.Addr().String(),
		"dev", lab.UnderlayLink); err != nil {
		t.Fatal(err)
	}
	// Without IPv6 the device sends no neighbour discovery or MLD frames
	// of its own, so ARP is the only thing that can teach Snorkel its MAC.
	if err := e.c2.Sysctl("net.ipv6.conf."+kernelVTEP+".disable_ipv6", "1"); err != nil {
		t.Fatal(err)
	}
	// The underlay is a veth, which never completes a checksum left to the
	// NIC: the kernel would hand Snorkel inner TCP segments whose checksum
	// holds only the pseudo-header sum, and c1's pods would drop them. A
	// real NIC completes them; here the stack must.
	if out, err := e.c2.Run(context.Background(), "ethtool", "-K", kernelVTEP, "tx", "off"); err != nil {
		t.Fatalf("ethtool -K %s tx off: %v: %s", kernelVTEP, err, out)
	}
	if err := e.c2.LinkUp(kernelVTEP); err != nil {
		t.Fatal(err)
	}
	for _, dst := range []netip.Prefix{c1.Spec.PodCIDR, c1.Spec.ServiceCIDR} {
		if err := e.c2.AddRoute(topo.Route{Dst: dst, Dev: kernelVTEP}); err != nil {
			t.Fatal(err)
		}
	}
	// c1's gateway must verify what the kernel sends.
	e.restartC1(t, "gateway-c1-kernel-peer", func(*gateway.Config) {})
}

// restartC1WithRemoteMAC restarts c1's gateway with its config plus the
// remote VTEP's MAC, and waits until it routes c2's CIDRs again.
func (e *env) restartC1WithRemoteMAC(t *testing.T, mac string) {
	t.Helper()
	e.restartC1(t, "gateway-c1-remote-mac", func(cfg *gateway.Config) {
		cfg.Remotes[0].VXLAN = &gateway.VXLANRemoteConfig{MAC: mac}
	})
}

// restartC1 restarts c1's gateway, as process name, with its config as
// edit changes it, and waits until it routes c2's CIDRs again. edit may
// assume the config has c2 as its only remote. c2 is no Snorkel gateway
// now, and its segments are not taken as checked.
func (e *env) restartC1(t *testing.T, name string, edit func(*gateway.Config)) {
	t.Helper()
	b, err := os.ReadFile(lab.ConfigFile(e.lab.StateDir, "c1"))
	if err != nil {
		t.Fatal(err)
	}
	var cfg gateway.Config
	if err := yaml.Unmarshal(b, &cfg); err != nil {
		t.Fatal(err)
	}
	if len(cfg.Remotes) != 1 {
		t.Fatalf("c1's config has %d remotes, want c2 alone", len(cfg.Remotes))
	}
	cfg.Remotes[0].CheckedSegments = false
	edit(&cfg)
	if b, err = lab.MarshalConfig(cfg); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), name+".yaml")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := e.gatewayProcess(t, e.c1).Stop(settle); err != nil {
		t.Fatal(err)
	}
	p, err := e.c1.Start(name, snorkelBin, "gateway", "--config", path)
	if err != nil {
		t.Fatal(err)
	}
	c2 := e.lab.Plan.Cluster("c2")
	waitUntil(t, settle, "the restarted c1 gateway", func() error {
		if !p.Alive() {
			log, _ := os.ReadFile(p.Log)
			t.Fatalf("restarted c1 gateway exited: %v\n%s", p.ExitError(), log)
		}
		routes, err := e.c1.Routes(e.tun("c1"))
		if err != nil {
			return err
		}
		for _, rt := range routes {
			if rt.Dst == c2.Spec.PodCIDR {
				return nil
			}
		}
		return fmt.Errorf("no route for %s into %s", c2.Spec.PodCIDR, e.tun("c1"))
	})
}

// waitUntil polls ready until it returns nil, failing the test after
// timeout with ready's last error.
func waitUntil(t *testing.T, timeout time.Duration, what string, ready func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := ready()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: %v", what, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
