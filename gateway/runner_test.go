package gateway

import (
	"context"
	"net/netip"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/vishvananda/netlink"

	"github.com/snorkel-net/snorkel/natengine"
	"github.com/snorkel-net/snorkel/packet"
)

// TestRunnerFollowsConfigs drives a Runner through the changes the agent
// makes: a first configuration starts the gateway; new Globalnet ingress
// addresses reach the NAT engine without a restart; a remote's new global
// CIDR moves its routes and guard, in place; a bad configuration is refused
// and leaves it running; no remotes at all stops it and keeps the guard.
func TestRunnerFollowsConfigs(t *testing.T) {
	inFreshNetns(t, func() {
		ctx := context.Background()
		r := NewRunner(nil)
		defer r.Close()
		cfg := globalnetConfig()
		cfg.TUN.Name = "snk-run0"
		cfg.Transport.WireGuard.PrivateKeyFile = filepath.Join(t.TempDir(), "key")
		if err := r.Apply(ctx, mustCompile(t, cfg)); err != nil {
			t.Error(err)
			return
		}
		first := linkIndex(t, "snk-run0")
		if r.PublicKey() == "" {
			t.Error("no WireGuard public key from the running gateway")
		}

		more := globalnetConfig()
		more.TUN.Name, more.Transport.WireGuard.PrivateKeyFile = cfg.TUN.Name, cfg.Transport.WireGuard.PrivateKeyFile
		more.Globalnet.Ingress = append(more.Globalnet.Ingress, GlobalIngress{Name: "api", Kind: IngressKindService, GlobalIP: "242.1.0.202", LocalIP: "10.88.0.20"})
		if err := r.Apply(ctx, mustCompile(t, more)); err != nil {
			t.Error(err)
			return
		}
		if got := linkIndex(t, "snk-run0"); got != first {
			t.Errorf("a Globalnet-only change recreated the TUN device (index %d, was %d)", got, first)
		}
		if dst := ingressTo(r, "242.2.0.9", "242.1.0.202"); dst != "10.88.0.20" {
			t.Errorf("a packet to the new ingress address went to %s, want 10.88.0.20", dst)
		}
		if st, _ := r.Stats(); st.Globalnet == nil || !slices.ContainsFunc(st.Globalnet.Ingress, func(in IngressStatus) bool { return in.Name == "api" }) {
			t.Errorf("/status does not show the new ingress address: %+v", st.Globalnet)
		}

		moved := more
		moved.Remotes = []Remote{more.Remotes[0]}
		moved.Remotes[0].GlobalCIDR = "242.3.0.0/16"
		if err := r.Apply(ctx, mustCompile(t, moved)); err != nil {
			t.Error(err)
			return
		}
		if got := linkIndex(t, "snk-run0"); got != first {
			t.Errorf("a changed remote recreated the TUN device (index %d, was %d)", got, first)
		}
		if !routed(t, "snk-run0", "242.3.0.0/16") || routed(t, "snk-run0", "242.2.0.0/16") {
			t.Error("the routes do not follow the remote's new global CIDR")
		}
		if got := guardedNow(t); !slices.Equal(got, []string{"242.3.0.0/16"}) {
			t.Errorf("guarded %v, want only the remote's new global CIDR 242.3.0.0/16", got)
		}

		bad := mustCompile(t, moved)
		bad.Remotes[0].Endpoint = netip.AddrPort{}
		if err := r.Apply(ctx, bad); err == nil {
			t.Error("a bad endpoint was accepted")
		}
		if _, ok := r.Stats(); !ok {
			t.Error("a refused configuration stopped the running gateway")
		}

		none := mustCompile(t, moved)
		none.Remotes = nil
		if err := r.Apply(ctx, none); err != nil {
			t.Error(err)
			return
		}
		if _, ok := r.Stats(); ok {
			t.Error("the gateway still runs with no remote clusters")
		}
		if _, err := netlink.LinkByName("snk-run0"); err == nil {
			t.Error("the TUN device outlived the gateway")
		}
		// As on a gateway turned passive: its node must still not send the
		// remote's traffic in cleartext.
		if got := guardedNow(t); !slices.Equal(got, []string{"242.3.0.0/16"}) {
			t.Errorf("with no remotes, guarded %v, want 242.3.0.0/16 still", got)
		}
	})
}

func linkIndex(t *testing.T, name string) int {
	t.Helper()
	l, err := netlink.LinkByName(name)
	if err != nil {
		t.Errorf("no link %s: %v", name, err)
		return 0
	}
	return l.Attrs().Index
}

func routed(t *testing.T, name, dst string) bool {
	t.Helper()
	l, err := netlink.LinkByName(name)
	if err != nil {
		t.Errorf("no link %s: %v", name, err)
		return false
	}
	routes, _ := netlink.RouteList(l, netlink.FAMILY_V4)
	for _, rt := range routes {
		if rt.Dst != nil && rt.Dst.String() == dst {
			return true
		}
	}
	return false
}

// ingressTo runs a TCP SYN from src to dst through the running gateway's NAT
// engine, from remote 0, and returns the destination it leaves with.
func ingressTo(r *Runner, src, dst string) string {
	r.mu.Lock()
	e := r.cur.g.xlate.(*natengine.Engine)
	r.mu.Unlock()
	b := ipv4TCP(netip.MustParseAddr(src), netip.MustParseAddr(dst), 60, true)
	var p packet.Parsed
	if r := p.Decode(b); r != packet.DropNone {
		return r.String()
	}
	if !e.Ingress(0, b, &p) {
		return "dropped"
	}
	return netip.AddrFrom4([4]byte(p.Dst[:4])).String()
}

// mustCompile is c's Spec; it fails t if c does not compile.
func mustCompile(t *testing.T, c Config) *Spec {
	t.Helper()
	s, err := c.Compile()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestRunnerReportsAGatewayThatFailed deletes a running gateway's TUN
// device under it: the gateway's read fails, and Failed says so, so that
// `snorkel gateway` exits rather than serve nothing.
func TestRunnerReportsAGatewayThatFailed(t *testing.T) {
	inFreshNetns(t, func() {
		r := NewRunner(nil)
		defer r.Close()
		cfg := validConfig()
		cfg.TUN.Name = "snk-fail0"
		cfg.Transport.WireGuard.PrivateKeyFile = filepath.Join(t.TempDir(), "key")
		if err := r.Apply(context.Background(), mustCompile(t, cfg)); err != nil {
			t.Error(err)
			return
		}
		// A Runner collects the running gateway's metrics.
		reg := prometheus.NewRegistry()
		reg.MustRegister(r)
		fams, err := reg.Gather()
		if err != nil || !slices.ContainsFunc(fams, func(f *dto.MetricFamily) bool { return f.GetName() == "submariner_connections" }) {
			t.Errorf("a registry holding the Runner gathers no submariner_connections (%v)", err)
		}
		l, err := netlink.LinkByName("snk-fail0")
		if err != nil {
			t.Error(err)
			return
		}
		if err := netlink.LinkDel(l); err != nil {
			t.Error(err)
			return
		}
		select {
		case err := <-r.Failed():
			if err == nil {
				t.Error("Failed gave a nil error")
			}
		case <-time.After(time.Minute):
			t.Error("the gateway's device is gone, but Failed said nothing in a minute")
		}
	})
}
