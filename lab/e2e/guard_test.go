package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/snorkel-net/snorkel/gateway"
	"github.com/snorkel-net/snorkel/lab"
	"github.com/snorkel-net/snorkel/lab/topo"
	"github.com/snorkel-net/snorkel/transport"
)

// TestKilledGatewayLeaksNoCleartext is the fail-closed promise: c1's node
// has a default route onto the underlay, a c1 pod pings a c2 pod without
// pause, and c1's gateway is killed with no chance to clean up. Its TUN
// device and the routes into it vanish with it; the underlay must then see
// no packet from or to either cluster's CIDRs, only the tunnel's.
func TestKilledGatewayLeaksNoCleartext(t *testing.T) {
	needRoot(t)
	for _, tr := range []string{transport.WireGuard, transport.ESP} {
		t.Run(tr, func(t *testing.T) {
			e := upLab(t, tr, "gk"+tr[:1])
			e.killC1AndCapture(t)
		})
	}
}

func (e *env) killC1AndCapture(t *testing.T) {
	c1, c2 := e.lab.Plan.Cluster("c1"), e.lab.Plan.Cluster("c2")
	c2Underlay := c2.Gateway.UnderlayIP.Addr()
	if err := e.c1.AddRoute(topo.Route{Dst: netip.MustParsePrefix("0.0.0.0/0"), Via: c2Underlay}); err != nil {
		t.Fatal(err)
	}
	var nets []string
	for _, c := range []*lab.ClusterPlan{c1, c2} {
		for _, p := range c.RoutedCIDRs() {
			nets = append(nets, "net "+p.String())
		}
	}
	// The marker, a datagram from c1's node to c2's discard port, is the
	// last packet of the check: once tcpdump prints it, it has printed
	// every packet before it.
	filter := fmt.Sprintf("(%s) or (udp and dst host %s and dst port 9)", strings.Join(nets, " or "), c2Underlay)
	at := startCapture(t, e.lab.Topo.NS(lab.UnderlayNS), lab.UnderlayBridge, filter, 0)

	p := startPing(t, e.c1Pod, e.c2IP)
	waitUntil(t, settle, "a reply through the tunnel", func() error {
		if p.replies() == 0 {
			return fmt.Errorf("no reply from %s yet:\n%s", e.c2IP, p.output())
		}
		return nil
	})
	if err := e.gatewayProcess(t, e.c1).Kill(); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, settle, "c1's TUN device to vanish with its gateway", func() error {
		if e.c1.HasLink(e.tun("c1")) {
			return fmt.Errorf("%s still exists", e.tun("c1"))
		}
		return nil
	})
	// Three seconds of traffic at 20 requests a second, all sent with no
	// gateway to carry them.
	from := p.lastSeq()
	waitUntil(t, settle, "60 more echo requests", func() error {
		if n := p.lastSeq() - from; n < 60 {
			return fmt.Errorf("%d sent since the gateway died", n)
		}
		return nil
	})
	marker, err := e.c1.DialContext(t.Context(), "udp", netip.AddrPortFrom(c2Underlay, 9).String())
	if err != nil {
		t.Fatal(err)
	}
	marker.Write([]byte("marker"))
	marker.Close()
	isMarker := func(l string) bool { return strings.Contains(l, " > "+c2Underlay.String()+".9: ") }
	lines := at.linesWhen(settle, func(ls []string) bool { return slices.ContainsFunc(ls, isMarker) })
	if !slices.ContainsFunc(lines, isMarker) {
		t.Fatalf("tcpdump did not print the marker within %v; it printed:\n%s", settle, strings.Join(lines, "\n"))
	}
	leaked := slices.DeleteFunc(lines, isMarker)
	if len(leaked) > 0 {
		t.Errorf("%d packets of the clusters' CIDRs crossed the underlay in cleartext after c1's gateway was killed:\n%s", len(leaked), strings.Join(leaked, "\n"))
	}
	// The guard is an unreachable route: the pod hears at once that its
	// packets go nowhere, instead of waiting out timeouts.
	if !strings.Contains(p.output(), "Destination Host Unreachable") {
		t.Errorf("the pod was never told its peer is unreachable:\n%s", p.output())
	}
}

// TestGuardOutlivesStopAndRestart checks the guard's life: c1's gateway is
// stopped gracefully, and the remotes' CIDRs stay unreachable on its node;
// it is started again and traffic flows with the same guard, not a second
// one; `snorkel gateway --uninstall` then removes the guard and not one
// other route, the running gateway's own included.
func TestGuardOutlivesStopAndRestart(t *testing.T) {
	needRoot(t)
	e := upLab(t, transport.WireGuard, "gs")
	ctx := t.Context()
	c2 := e.lab.Plan.Cluster("c2")
	var want []string
	for _, p := range c2.RoutedCIDRs() {
		want = append(want, fmt.Sprintf("unreachable %s proto %d metric %d", p, gateway.GuardProtocol, gateway.GuardMetric))
	}
	slices.Sort(want)
	if got := e.guardRoutes(t); !slices.Equal(got, want) {
		t.Fatalf("c1's node has guard routes %q, want %q", got, want)
	}

	if err := e.gatewayProcess(t, e.c1).Stop(settle); err != nil {
		t.Fatal(err)
	}
	if e.c1.HasLink(e.tun("c1")) {
		t.Fatalf("%s outlived its gateway", e.tun("c1"))
	}
	if got := e.guardRoutes(t); !slices.Equal(got, want) {
		t.Errorf("after a graceful stop, guard routes %q, want %q", got, want)
	}
	if out, err := e.c1.Run(ctx, "ip", "route", "get", e.c2IP.String()); err == nil || !strings.Contains(err.Error(), "No route to host") {
		t.Errorf("with c1's gateway stopped, the route to %s is %q (%v), want none", e.c2IP, out, err)
	}

	p, err := e.c1.Start("gateway-c1-again", snorkelBin, "gateway", "--config", lab.ConfigFile(e.lab.StateDir, "c1"))
	if err != nil {
		t.Fatal(err)
	}
	waitUntil(t, settle, "the restarted gateway to carry a ping", func() error {
		if !p.Alive() {
			log, _ := os.ReadFile(p.Log)
			t.Fatalf("the restarted gateway exited: %v\n%s", p.ExitError(), log)
		}
		if unanswered, out := pingEach(ctx, e.c1Pod, e.c2IP, 1); len(unanswered) > 0 {
			return fmt.Errorf("unanswered:\n%s", out)
		}
		return nil
	})
	if got := e.guardRoutes(t); !slices.Equal(got, want) {
		t.Errorf("after a restart, guard routes %q, want %q", got, want)
	}

	before := e.allRoutes(t)
	out, err := e.c1.Run(ctx, snorkelBin, "gateway", "--uninstall")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range c2.RoutedCIDRs() {
		if !strings.Contains(string(out), p.String()) {
			t.Errorf("--uninstall does not say it removed the guard of %s:\n%s", p, out)
		}
	}
	if got := e.guardRoutes(t); len(got) > 0 {
		t.Errorf("guard routes left after --uninstall: %q", got)
	}
	// Only what went missing counts: the kernel may add routes meanwhile
	// (an IPv6 link-local address finishing its duplicate detection).
	after := e.allRoutes(t)
	gone := slices.DeleteFunc(slices.Clone(before), func(r string) bool { return slices.Contains(after, r) })
	slices.Sort(gone)
	if !slices.Equal(gone, want) {
		t.Errorf("--uninstall removed %q, want it to remove exactly %q", gone, want)
	}
	if unanswered, out := pingEach(ctx, e.c1Pod, e.c2IP, 1); len(unanswered) > 0 {
		t.Errorf("the running gateway lost traffic to --uninstall:\n%s", out)
	}
}

// guardRoutes lists the guard's routes on c1's node as ip(8) prints them.
func (e *env) guardRoutes(t *testing.T) []string {
	t.Helper()
	proto := " proto " + strconv.Itoa(gateway.GuardProtocol) + " "
	rs := slices.DeleteFunc(e.allRoutes(t), func(r string) bool { return !strings.Contains(r+" ", proto) })
	slices.Sort(rs)
	return rs
}

// allRoutes lists every route of every table on c1's node, both families,
// as ip(8) prints them.
func (e *env) allRoutes(t *testing.T) []string {
	t.Helper()
	var rs []string
	for _, family := range []string{"-4", "-6"} {
		out, err := e.c1.Run(t.Context(), "ip", family, "route", "show", "table", "all")
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(string(out), "\n") {
			if l = strings.TrimSpace(l); l != "" {
				rs = append(rs, l)
			}
		}
	}
	return rs
}

// pinger is a ping(8) that runs until the test ends, sending a request every
// 50 ms and saying, for each, whether it was answered (-O).
type pinger struct {
	mu  sync.Mutex
	out bytes.Buffer
}

func (p *pinger) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.Write(b)
}

func (p *pinger) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

func startPing(t *testing.T, ns *topo.NS, dst netip.Addr) *pinger {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	p := &pinger{}
	cmd := ns.Command(ctx, "ping", "-n", "-O", "-i", "0.05", dst.String())
	cmd.Stdout, cmd.Stderr = p, p
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatalf("ping in %s: %v", ns, err)
	}
	t.Cleanup(func() {
		cancel()
		cmd.Wait()
	})
	return p
}

var pingSeq = regexp.MustCompile(`icmp_seq=(\d+)`)

// lastSeq is the highest sequence number ping has reported on.
func (p *pinger) lastSeq() int {
	last := 0
	for _, m := range pingSeq.FindAllStringSubmatch(p.output(), -1) {
		n, _ := strconv.Atoi(m[1])
		last = max(last, n)
	}
	return last
}

func (p *pinger) replies() int {
	return len(pingReply.FindAllString(p.output(), -1))
}
