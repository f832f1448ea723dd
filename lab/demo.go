package lab

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/snorkel-net/snorkel/lab/topo"
)

// Check is the outcome of one demo check.
type Check struct {
	Kind   string // ping, http, balance, bulk, egress, import, dns
	What   string // from → to
	OK     bool
	Detail string
}

// String renders a check as one line a person reads at a glance.
func (c Check) String() string {
	mark := "✓"
	if !c.OK {
		mark = "✗"
	}
	return fmt.Sprintf("%s %-7s %-42s %s", mark, c.Kind, c.What, c.Detail)
}

// Demo tuning.
const (
	// shownRequests is how many ClusterIP requests get a line each.
	shownRequests = 6
	// maxBalanceRequests bounds the requests made to see every backend
	// answer; with three backends picked at random, missing one in 30
	// requests happens about once in 60,000 runs.
	maxBalanceRequests = 30
	bulkBytes          = 1 << 20
	pingCount          = 3
	// pingDeadline leaves room for the tunnel's handshake on the first
	// packet.
	pingDeadline = 10 * time.Second
)

// Demo checks traffic from the first pod of the first cluster to every other
// cluster, both ways, printing a line per check to w as it completes. It
// returns the checks.
func (l *Lab) Demo(ctx context.Context, w io.Writer) []Check {
	var checks []Check
	report := func(c Check) {
		if ctx.Err() != nil {
			// Interrupted: what failed since says nothing about the lab.
			return
		}
		checks = append(checks, c)
		fmt.Fprintln(w, c)
	}
	if l.Transport != TransportKernel {
		for _, c := range l.healthChecks(ctx) {
			report(c)
		}
	}
	if l.Kube {
		for _, c := range l.importChecks(ctx) {
			report(c)
		}
	}
	if l.Plan.Globalnet() {
		l.globalnetDemo(ctx, report)
		if l.hasDNSD() {
			l.dnsDemo(ctx, l.Plan.Clusters[0].Pods[0], report)
		}
		return checks
	}
	src := l.Plan.Clusters[0].Pods[0]
	srcNS := l.Topo.NS(src.NS)
	for _, r := range l.Plan.Remotes(&l.Plan.Clusters[0]) {
		dst := r.Pods[0]
		dstNS := l.Topo.NS(dst.NS)
		report(l.ping(ctx, srcNS, src, dst))
		report(l.ping(ctx, dstNS, dst, src))
		report(l.httpPod(ctx, srcNS, src, dst))
		for _, s := range r.Services {
			for _, c := range l.httpService(ctx, srcNS, src, s, s.Spec.ClusterIP, exactly(src.IP)) {
				report(c)
			}
		}
		report(l.bulk(ctx, srcNS, src, dst))
	}
	if l.hasDNSD() {
		l.dnsDemo(ctx, src, report)
	}
	return checks
}

func arrow(from, to string) string { return from + " → " + to }

var (
	pingCountRE = regexp.MustCompile(`(\d+) packets transmitted, (\d+) received`)
	pingRTTRE   = regexp.MustCompile(`= [\d.]+/([\d.]+)/`)
)

func (l *Lab) ping(ctx context.Context, ns *topo.NS, from, to PodPlan) Check {
	return l.pingAddr(ctx, ns, from, to.Name, to.IP)
}

func (l *Lab) pingAddr(ctx context.Context, ns *topo.NS, from PodPlan, toName string, to netip.Addr) Check {
	c := Check{Kind: "ping", What: arrow(from.Name, fmt.Sprintf("%s %s", toName, to))}
	out, err := ns.Run(ctx, "ping", "-n", "-q", "-c", strconv.Itoa(pingCount), "-i", "0.2",
		"-w", strconv.Itoa(int(pingDeadline/time.Second)), to.String())
	m := pingCountRE.FindStringSubmatch(string(out))
	if m == nil {
		c.Detail = fmt.Sprintf("ping failed: %v", err)
		return c
	}
	got, _ := strconv.Atoi(m[2])
	c.OK = got >= pingCount
	c.Detail = fmt.Sprintf("%d/%s replies", got, m[1])
	if rtt := pingRTTRE.FindStringSubmatch(string(out)); rtt != nil {
		c.Detail += ", avg " + rtt[1] + " ms"
	}
	return c
}

// clientRule says which client address a backend should see.
type clientRule struct {
	ok func(netip.Addr) bool
	// want describes the addresses ok accepts, for the check's line.
	want string
}

// exactly is the rule without Globalnet: the backend sees the client pod's
// own address.
func exactly(a netip.Addr) clientRule {
	return clientRule{ok: func(b netip.Addr) bool { return a == b }, want: a.String() + " (the source must not be translated)"}
}

// whereamiCheck asks url and checks who answered and whom it saw.
func whereamiCheck(ctx context.Context, client *http.Client, c Check, url string, wantPod func(string) bool, wantClient clientRule) (Check, WhereamiReply) {
	r, err := getWhereami(ctx, client, url)
	if err != nil {
		c.Detail = "no answer: " + err.Error()
		return c, r
	}
	c.Detail = fmt.Sprintf("answered by %s (%s), saw client %s", r.Pod, r.Cluster, r.Client)
	seen, _ := netip.ParseAddr(clientHost(r.Client))
	switch {
	case !wantPod(r.Pod):
		c.Detail += "; not a pod that should answer"
	case !wantClient.ok(seen):
		c.Detail += "; want client " + wantClient.want
	default:
		c.OK = true
	}
	return c, r
}

func (l *Lab) httpPod(ctx context.Context, ns *topo.NS, from, to PodPlan) Check {
	return l.httpPodAt(ctx, ns, from, to, to.IP, exactly(from.IP))
}

// httpPodAt asks pod `to` at address at (its own or its global IP) who it
// is, and checks the client address it saw.
func (l *Lab) httpPodAt(ctx context.Context, ns *topo.NS, from, to PodPlan, at netip.Addr, wantClient clientRule) Check {
	addr := netip.AddrPortFrom(at, WhereamiPort)
	c := Check{Kind: "http", What: arrow(from.Name, fmt.Sprintf("%s %s", to.Name, addr))}
	c, _ = whereamiCheck(ctx, ns.HTTPClient(), c, "http://"+addr.String()+"/", func(p string) bool { return p == to.Name }, wantClient)
	return c
}

// httpService makes requests to a ClusterIP, one line each for the first
// shownRequests, then more until every backend has answered, and sums up
// how the load was spread.
func (l *Lab) httpService(ctx context.Context, ns *topo.NS, from PodPlan, s ServicePlan, to netip.Addr, wantClient clientRule) []Check {
	addr := netip.AddrPortFrom(to, s.Spec.Port)
	url := "http://" + addr.String() + "/"
	isBackend := func(p string) bool {
		for _, b := range s.Backends {
			if b.Name == p {
				return true
			}
		}
		return false
	}
	client := ns.HTTPClient()
	var checks []Check
	seen := map[string]int{}
	requests := 0
	for requests < maxBalanceRequests && (requests < shownRequests || len(seen) < len(s.Backends)) {
		requests++
		c := Check{Kind: "http", What: arrow(from.Name, fmt.Sprintf("%s %s #%d", s.Spec.Name, addr, requests))}
		c, r := whereamiCheck(ctx, client, c, url, isBackend, wantClient)
		if c.OK {
			seen[r.Pod]++
		}
		if requests <= shownRequests || !c.OK {
			checks = append(checks, c)
		}
	}
	bal := Check{Kind: "balance", What: fmt.Sprintf("%s %s", s.Spec.Name, addr), OK: len(seen) == len(s.Backends)}
	names := make([]string, 0, len(seen))
	for p := range seen {
		names = append(names, p)
	}
	sort.Strings(names)
	var parts []string
	for _, p := range names {
		parts = append(parts, fmt.Sprintf("%s ×%d", p, seen[p]))
	}
	bal.Detail = fmt.Sprintf("%d of %d backends answered in %d requests: %s", len(seen), len(s.Backends), requests, strings.Join(parts, ", "))
	return append(checks, bal)
}

// bulk fetches a megabyte, which takes full-sized segments across the
// tunnel: it fails where the MTU or MSS clamping is wrong even when small
// requests pass.
func (l *Lab) bulk(ctx context.Context, ns *topo.NS, from, to PodPlan) Check {
	return l.bulkAt(ctx, ns, from, to, to.IP)
}

func (l *Lab) bulkAt(ctx context.Context, ns *topo.NS, from, to PodPlan, at netip.Addr) Check {
	addr := netip.AddrPortFrom(at, WhereamiPort)
	c := Check{Kind: "bulk", What: arrow(from.Name, fmt.Sprintf("%s %s", to.Name, addr))}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://%s/bytes?n=%d", addr, bulkBytes), nil)
	if err != nil {
		c.Detail = err.Error()
		return c
	}
	start := time.Now()
	resp, err := ns.HTTPClient().Do(req)
	if err != nil {
		c.Detail = "no answer: " + err.Error()
		return c
	}
	defer resp.Body.Close()
	n, err := io.Copy(io.Discard, resp.Body)
	d := time.Since(start)
	if err != nil || n != bulkBytes {
		c.Detail = fmt.Sprintf("got %d of %d bytes: %v", n, bulkBytes, err)
		return c
	}
	c.OK = true
	c.Detail = fmt.Sprintf("%d KiB in %s (%.0f Mbit/s)", n>>10, d.Round(time.Millisecond), float64(n)*8/d.Seconds()/1e6)
	return c
}
