package lab

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/snorkel-net/snorkel/lab/topo"
	"github.com/snorkel-net/snorkel/transport"
)

// ErrChecksFailed is returned by Run when the lab came up but a demo check
// failed.
var ErrChecksFailed = errors.New("lab: checks failed")

// Run is `snorkel lab`: it brings the lab up, runs the demo, and tears it
// all down, also when ctx is cancelled (Ctrl-C). The state directory is
// removed after a clean pass and kept, with its logs, otherwise.
func Run(ctx context.Context, o Options, w io.Writer) error {
	l, err := upAndDescribe(ctx, o, w, "snorkel lab")
	if err != nil {
		return err
	}
	checks := l.Demo(ctx, w)
	failed := 0
	for _, c := range checks {
		if !c.OK {
			failed++
		}
	}
	var diag string
	if failed > 0 || ctx.Err() != nil {
		diag = l.writeDiagnostics()
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "tearing down")
	if err := l.Close(); err != nil {
		return fmt.Errorf("lab: teardown: %w\nrun `snorkel lab down --state-dir %s` to retry", err, l.StateDir)
	}
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("lab: interrupted; everything torn down; logs in %s, diagnostics in %s", l.Topo.LogDir(), diag)
	case failed > 0:
		return fmt.Errorf("%w: %d of %d failed; logs in %s, diagnostics in %s", ErrChecksFailed, failed, len(checks), l.Topo.LogDir(), diag)
	}
	fmt.Fprintf(w, "all %d checks passed\n", len(checks))
	return l.Clean()
}

// RunScenarios is `snorkel lab run` without a scenario named: it runs each
// scenario in turn with the same options, also after one fails, and fails
// if any failed. An interruption stops it.
func RunScenarios(ctx context.Context, o Options, scenarios []Scenario, w io.Writer) error {
	var failed []string
	var errs []error
	for i, sc := range scenarios {
		if i > 0 {
			fmt.Fprintln(w)
		}
		o.Scenario = sc
		if err := Run(ctx, o, w); err != nil {
			failed = append(failed, sc.Name)
			errs = append(errs, fmt.Errorf("scenario %s: %w", sc.Name, err))
			if ctx.Err() != nil {
				break
			}
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("lab: %d of %d scenarios failed (%s):\n%w", len(failed), len(scenarios), strings.Join(failed, ", "), errors.Join(errs...))
	}
	if len(scenarios) > 1 {
		fmt.Fprintf(w, "\nall %d scenarios passed\n", len(scenarios))
	}
	return nil
}

// upAndDescribe brings the lab up, reporting progress to w under the
// command's name, and describes what it built.
func upAndDescribe(ctx context.Context, o Options, w io.Writer, command string) (*Lab, error) {
	o.applyDefaults()
	o.DNS = true
	fmt.Fprintf(w, "%s: scenario %s, transport %s, state in %s\n", command, o.Scenario.Name, o.Transport, o.StateDir)
	o.Progress = w
	l, err := Up(ctx, o)
	if err != nil {
		return nil, err
	}
	fmt.Fprintln(w)
	describe(w, l)
	fmt.Fprintln(w)
	return l, nil
}

// UpAndDescribe is `snorkel lab up`: it brings the lab up, leaves it
// running, and says how to explore it.
func UpAndDescribe(ctx context.Context, o Options, w io.Writer) error {
	l, err := upAndDescribe(ctx, o, w, "snorkel lab up")
	if err != nil {
		return err
	}
	hints(w, l)
	fmt.Fprintf(w, "\nstop it with: snorkel lab down --state-dir %s\n", l.StateDir)
	return nil
}

// Down is `snorkel lab down`: it tears down the lab recorded in stateDir.
func Down(stateDir string, w io.Writer) error {
	l, err := Attach(stateDir)
	if err != nil {
		return err
	}
	for _, p := range l.Topo.Processes() {
		if p.Alive() {
			fmt.Fprintf(w, "stopping %s (pid %d)\n", p.Name, p.PID)
		}
	}
	nss := l.Topo.Namespaces()
	if err := l.Close(); err != nil {
		return fmt.Errorf("lab: teardown: %w", err)
	}
	fmt.Fprintf(w, "deleted %d namespaces\n", len(nss))
	if left, err := topo.List(l.Plan.Prefix); err == nil && len(left) > 0 {
		fmt.Fprintf(w, "namespaces with the prefix %q remain that this lab did not create: %s\n", l.Plan.Prefix, strings.Join(left, ", "))
	}
	return l.Clean()
}

// describe prints the clusters: who is where.
func describe(w io.Writer, l *Lab) {
	procs := map[string]int{}
	for _, p := range l.Topo.Processes() {
		procs[p.Name] = p.PID
	}
	for _, c := range l.Plan.Clusters {
		gw := "kernel routing, no gateway process"
		if pid, ok := procs[gatewayProcess(c.Spec.ID)]; ok {
			gw = fmt.Sprintf("snorkel gateway pid %d on %s", pid, c.Gateway.TUN)
		}
		if pid, ok := procs[agentProcess(c.Spec.ID)]; ok {
			gw = fmt.Sprintf("snorkel agent pid %d, gateway on %s", pid, c.Gateway.TUN)
		}
		global := ""
		if c.Spec.GlobalCIDR.IsValid() {
			global = "  global " + c.Spec.GlobalCIDR.String()
		}
		fmt.Fprintf(w, "cluster %s  pods %s  services %s%s\n", c.Spec.ID, c.Spec.PodCIDR, c.Spec.ServiceCIDR, global)
		fmt.Fprintf(w, "  node %s%s  underlay %s  %s\n", l.Plan.Prefix, c.Gateway.NS, c.Gateway.UnderlayIP.Addr(), gw)
		if c.Spec.ID == l.Plan.Clusters[0].Spec.ID && l.hasDNSD() {
			dnsd := "dnsd in this process"
			if pid, ok := procs[dnsdProcess]; ok {
				dnsd = fmt.Sprintf("snorkel dnsd pid %d", pid)
			}
			fmt.Fprintf(w, "  dns  %s  %s, names <svc>.%s.svc.clusterset.local\n", l.Plan.DNSServer(), dnsd, KubeNamespace)
		}
		for _, p := range c.Pods {
			line := fmt.Sprintf("  pod  %s%-10s %s", l.Plan.Prefix, p.NS, p.IP)
			if p.GlobalIP.IsValid() {
				line += "  global " + p.GlobalIP.String()
			}
			fmt.Fprintln(w, line)
		}
		for _, s := range c.Services {
			var bs []string
			for _, b := range s.Backends {
				bs = append(bs, b.Name)
			}
			switch {
			case s.Spec.Headless:
				fmt.Fprintf(w, "  svc  %-14s headless -> %s\n", s.Spec.Name, strings.Join(bs, ", "))
			case s.GlobalIP.IsValid():
				fmt.Fprintf(w, "  svc  %-14s %s:%d (global %s) -> %s\n", s.Spec.Name, s.Spec.ClusterIP, s.Spec.Port, s.GlobalIP, strings.Join(bs, ", "))
			default:
				fmt.Fprintf(w, "  svc  %-14s %s:%d -> %s\n", s.Spec.Name, s.Spec.ClusterIP, s.Spec.Port, strings.Join(bs, ", "))
			}
		}
	}
}

// hints prints commands to explore a running lab.
func hints(w io.Writer, l *Lab) {
	src := l.Plan.Clusters[0].Pods[0]
	fmt.Fprintln(w, "explore:")
	for _, r := range l.Plan.Remotes(&l.Plan.Clusters[0]) {
		for _, s := range r.Services {
			switch {
			case s.GlobalIP.IsValid():
				fmt.Fprintf(w, "  ip netns exec %s%s curl -s http://%s:%d/\n", l.Plan.Prefix, src.NS, s.GlobalIP, s.Spec.Port)
			case !s.Spec.Headless:
				fmt.Fprintf(w, "  ip netns exec %s%s curl -s http://%s:%d/\n", l.Plan.Prefix, src.NS, s.Spec.ClusterIP, s.Spec.Port)
			}
		}
		if to := pingTarget(r); to.IsValid() {
			fmt.Fprintf(w, "  ip netns exec %s%s ping -c 3 %s\n", l.Plan.Prefix, src.NS, to)
		}
		for _, s := range r.Services {
			if !l.hasDNSD() {
				break
			}
			fmt.Fprintf(w, "  ip netns exec %s%s dig @%s %s.%s.svc.clusterset.local\n", l.Plan.Prefix, src.NS, l.Plan.DNSServer().Addr(), s.Spec.Name, KubeNamespace)
		}
	}
	if l.Plan.Globalnet() && l.Transport != TransportKernel {
		for _, c := range l.Plan.Clusters {
			fmt.Fprintf(w, "  ip netns exec %s%s snorkel show flows\n", l.Plan.Prefix, c.Gateway.NS)
		}
	}
	for _, c := range l.Plan.Clusters {
		fmt.Fprintf(w, "  ip netns exec %s%s ip route\n", l.Plan.Prefix, c.Gateway.NS)
		if l.Transport == transport.WireGuard {
			fmt.Fprintf(w, "  wg show %s\n", c.Gateway.TUN)
		}
	}
	if l.Kube {
		ul := l.Plan.Prefix + UnderlayNS
		for _, c := range l.Plan.Clusters {
			fmt.Fprintf(w, "  ip netns exec %s snorkel show connections --kubeconfig %s\n", ul, KubeconfigFile(l.StateDir, c.Spec.ID))
		}
		fmt.Fprintf(w, "  ip netns exec %s kubectl --kubeconfig %s get serviceimports,endpointslices -n %s\n", ul, KubeconfigFile(l.StateDir, l.Plan.Clusters[0].Spec.ID), KubeNamespace)
	}
	fmt.Fprintf(w, "  snorkel lab status --state-dir %s\n", l.StateDir)
}

// Status is `snorkel lab status`.
func Status(ctx context.Context, stateDir string, w io.Writer) error {
	l, err := Attach(stateDir)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "lab in %s: scenario %s, transport %s, prefix %q\n", stateDir, l.Plan.Scenario.Name, l.Transport, l.Plan.Prefix)
	mark := func(ok bool) string {
		if ok {
			return "✓"
		}
		return "✗"
	}
	healthy := true
	fmt.Fprintln(w, "namespaces:")
	for _, ns := range l.Topo.Namespaces() {
		ok := topo.Exists(ns.Name())
		healthy = healthy && ok
		fmt.Fprintf(w, "  %s %s\n", mark(ok), ns.Name())
	}
	fmt.Fprintln(w, "processes:")
	for _, p := range l.Topo.Processes() {
		ok := p.Alive()
		healthy = healthy && ok
		state := "running"
		if !ok {
			state = "not running"
		}
		fmt.Fprintf(w, "  %s %-16s pid %-7d %s  log %s\n", mark(ok), p.Name, p.PID, state, p.Log)
	}
	if l.Transport != TransportKernel {
		fmt.Fprintln(w, "gateways:")
		for i := range l.Plan.Clusters {
			c := &l.Plan.Clusters[i]
			gatewayStatus(ctx, w, l, c)
		}
	}
	fmt.Fprintln(w)
	hints(w, l)
	if !healthy {
		return errors.New("lab: degraded; see ✗ above, or tear it down with `snorkel lab down`")
	}
	return nil
}

func gatewayStatus(ctx context.Context, w io.Writer, l *Lab, c *ClusterPlan) {
	fmt.Fprintf(w, "  %s: %s%s, tun %s, underlay %s, config %s\n", c.Spec.ID, l.Plan.Prefix, c.Gateway.NS, c.Gateway.TUN, c.Gateway.UnderlayIP.Addr(), ConfigFile(l.StateDir, c.Spec.ID))
	gw := l.Topo.NS(c.Gateway.NS)
	if gw == nil || !topo.Exists(gw.Name()) {
		fmt.Fprintln(w, "    namespace missing")
		return
	}
	if err := missingRoutes(gw, c.Gateway.TUN, l.Plan.Remotes(c)); err != nil {
		fmt.Fprintf(w, "    routes: ✗ %v\n", err)
	} else if rs, err := gw.Routes(c.Gateway.TUN); err == nil {
		var s []string
		for _, r := range rs {
			s = append(s, r.String())
		}
		fmt.Fprintf(w, "    routes: %s\n", strings.Join(s, ", "))
	}
	st, err := fetchStatus(ctx, gw)
	if err != nil {
		fmt.Fprintf(w, "    /status: %v\n", err)
		return
	}
	fmt.Fprintf(w, "    /status (http://%s/status in the node):\n      %s\n", DebugAddress, strings.ReplaceAll(st, "\n", "\n      "))
}

// fetchStatus returns a gateway's /status document, indented.
func fetchStatus(ctx context.Context, gw *topo.NS) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+DebugAddress+"/status", nil)
	if err != nil {
		return "", err
	}
	resp, err := gw.HTTPClient().Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("%s", resp.Status)
	}
	var out bytes.Buffer
	if json.Indent(&out, bytes.TrimSpace(b), "", "  ") != nil {
		return strings.TrimSpace(string(b)), nil
	}
	return out.String(), nil
}

func (l *Lab) diagnosticsPath() string {
	return filepath.Join(l.Topo.LogDir(), "diagnostics.txt")
}

// writeDiagnostics saves what a person debugging a failed run looks at
// first (routes, rulesets, gateway status) before teardown destroys it, and
// returns the file's path.
func (l *Lab) writeDiagnostics() string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var b bytes.Buffer
	for _, ns := range l.Topo.Namespaces() {
		fmt.Fprintf(&b, "=== %s\n", ns.Name())
		for _, cmd := range [][]string{{"ip", "-br", "addr"}, {"ip", "route"}, {"nft", "list", "ruleset"}} {
			out, err := ns.Run(ctx, cmd[0], cmd[1:]...)
			fmt.Fprintf(&b, "--- %s\n%s", strings.Join(cmd, " "), out)
			if err != nil {
				fmt.Fprintf(&b, "(%v)\n", err)
			}
		}
	}
	for i := range l.Plan.Clusters {
		c := &l.Plan.Clusters[i]
		if gw := l.Topo.NS(c.Gateway.NS); gw != nil && l.Transport != TransportKernel {
			st, err := fetchStatus(ctx, gw)
			if err != nil {
				st = err.Error()
			}
			fmt.Fprintf(&b, "=== gateway %s /status\n%s\n", c.Spec.ID, st)
		}
	}
	path := l.diagnosticsPath()
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		return "(not written: " + err.Error() + ")"
	}
	return path
}
