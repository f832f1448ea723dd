package perf

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/snorkel-net/snorkel/gateway"
	"github.com/snorkel-net/snorkel/perf/topo"
)

// Baselines that ThroughputOptions.Baselines takes.
const (
	BaselineWireGuardGo = "wireguard-go"
	BaselineKernel      = "kernel"
)

// BaselineNames lists the baselines in the order they are set up.
var BaselineNames = []string{BaselineWireGuardGo, BaselineKernel}

// TunnelMTU is the inner MTU of Snorkel's WireGuard path on a 1500-byte
// underlay (1500 minus 60 bytes of IPv4, UDP and WireGuard headers), which
// the wireguard-go baseline is given too.
const TunnelMTU = 1440

// WireGuardTarget is the ratio of Snorkel's WireGuard throughput to plain
// wireguard-go's that the project holds itself to.
const WireGuardTarget = 0.9

// GlobalnetTarget is the ratio of a Snorkel transport's throughput with
// Globalnet, both gateways translating every packet, to the same
// transport's without it that the project holds itself to.
const GlobalnetTarget = 0.95

// Defaults of ThroughputOptions.
const (
	DefaultBenchStateDir = "/run/snorkel-bench"
	DefaultBenchPrefix   = "snb-"
)

// ThroughputOptions configures RunThroughput.
type ThroughputOptions struct {
	// Transports are the Snorkel transports to measure (gateway.Transports).
	Transports []string
	// Globalnet adds, for every transport, Snorkel over it between
	// clusters joined by Globalnet (GlobalnetSetup).
	Globalnet bool
	// Baselines are the other systems to measure (BaselineNames).
	Baselines []string
	// Reps is the number of repetitions of each system; default 3.
	Reps int
	// Duration is how long each repetition sends, in whole seconds;
	// default 10s.
	Duration time.Duration
	// OutDir receives results.json, report.md and the raw tool output;
	// it is created.
	OutDir string
	// StateDir holds each system's lab state in a subdirectory; default
	// DefaultBenchStateDir.
	StateDir string
	// Prefix starts every namespace name, followed by a short tag per
	// system; default DefaultBenchPrefix. At most 9 characters, since
	// interface names carry it too.
	Prefix string
	// Binary is the snorkel binary gateways run from; default
	// os.Executable().
	Binary string
	// WireGuardGo is the wireguard-go binary; default FindWireGuardGo().
	WireGuardGo string
	// IdleWait bounds the wait before each repetition for the host to be
	// at most IdleBusyMax percent busy; defaults 60s and 25.
	IdleWait    time.Duration
	IdleBusyMax float64
	// CPUProfile records a CPU profile of every tunnel process that
	// serves one (Snorkel's gateways) during each repetition.
	CPUProfile bool
	// Command is the command line recorded in the report.
	Command string
	// Progress receives a line per step; nil discards them.
	Progress io.Writer
}

func (o *ThroughputOptions) applyDefaults() {
	if o.Reps == 0 {
		o.Reps = 3
	}
	if o.Duration == 0 {
		o.Duration = 10 * time.Second
	}
	if o.StateDir == "" {
		o.StateDir = DefaultBenchStateDir
	}
	if o.Prefix == "" {
		o.Prefix = DefaultBenchPrefix
	}
	if o.IdleWait == 0 {
		o.IdleWait = 60 * time.Second
	}
	if o.IdleBusyMax == 0 {
		o.IdleBusyMax = 25
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
}

// validate reports every problem with the options, each naming its flag.
func (o *ThroughputOptions) validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	for _, t := range o.Transports {
		if !slices.Contains(gateway.Transports, t) {
			bad("transport %q: use one of %s", t, strings.Join(gateway.Transports, ", "))
		}
	}
	for _, b := range o.Baselines {
		if !slices.Contains(BaselineNames, b) {
			bad("baseline %q: use one of %s", b, strings.Join(BaselineNames, ", "))
		}
	}
	if len(o.Transports)+len(o.Baselines) == 0 {
		bad("nothing to measure: give a transport or a baseline")
	}
	if o.Globalnet && len(o.Transports) == 0 {
		bad("globalnet: it adds a Globalnet system per Snorkel transport, and transport is none; give a transport (%s or all) or drop globalnet", strings.Join(gateway.Transports, ", "))
	}
	if o.Reps < 1 {
		bad("reps %d: give at least 1", o.Reps)
	}
	if o.Duration < time.Second || o.Duration%time.Second != 0 {
		bad("duration %s: give a whole number of seconds, at least 1s (iperf3 -t takes seconds)", o.Duration)
	}
	if o.OutDir == "" {
		bad("out: give an output directory")
	}
	if len(o.Prefix) > 9 {
		bad("prefix %q: at most 9 characters, since interface names carry it with a system tag and the cluster ID", o.Prefix)
	} else if err := topo.ValidPrefix(o.Prefix + "xx-"); err != nil {
		bad("prefix %q: use lower-case letters, digits and '-'", o.Prefix)
	}
	if o.IdleBusyMax <= 0 || o.IdleBusyMax > 100 {
		bad("idle-busy %g: give a percentage in (0, 100]", o.IdleBusyMax)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("perf: %w", err)
	}
	return nil
}

// setups returns the systems the options ask for: Snorkel's first, in
// transport order, each followed by its Globalnet system when asked for,
// then the baselines.
func (o *ThroughputOptions) setups() []Setup {
	var out []Setup
	for _, t := range o.Transports {
		out = append(out, SnorkelSetup(t))
		if o.Globalnet {
			out = append(out, GlobalnetSetup(t))
		}
	}
	for _, b := range BaselineNames {
		if !slices.Contains(o.Baselines, b) {
			continue
		}
		switch b {
		case BaselineWireGuardGo:
			out = append(out, WireGuardGoSetup(o.WireGuardGo, TunnelMTU))
		case BaselineKernel:
			out = append(out, KernelSetup())
		}
	}
	return out
}

// RunThroughput measures single-flow TCP throughput from a pod of one
// cluster to a pod of another through every system the options name: it
// brings all of them up, measures them in interleaved rounds, tears them
// down, and writes results.json and report.md to OutDir. It returns the
// results also when some measurements failed (they carry their error); it
// returns an error when a system cannot be brought up, or with the partial
// results when ctx is cancelled.
func RunThroughput(ctx context.Context, o ThroughputOptions) (*Results, error) {
	o.applyDefaults()
	if err := o.validate(); err != nil {
		return nil, err
	}
	if os.Geteuid() != 0 {
		return nil, errors.New("perf: needs root, to create network namespaces and TUN devices")
	}
	if o.Binary == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("perf: find own binary: %w", err)
		}
		o.Binary = exe
	}
	if slices.Contains(o.Baselines, BaselineWireGuardGo) && o.WireGuardGo == "" {
		p, err := FindWireGuardGo()
		if err != nil {
			return nil, err
		}
		o.WireGuardGo = p
	}
	if err := os.MkdirAll(filepath.Join(o.OutDir, "raw"), 0o755); err != nil {
		return nil, fmt.Errorf("perf: output directory: %w", err)
	}
	res := &Results{
		Benchmark: "throughput",
		Command:   o.Command,
		Started:   time.Now().UTC(),
		Machine:   ReadMachine(ctx),
		Settings: Settings{
			Workload:    o.workload(),
			Reps:        o.Reps,
			DurationSec: o.Duration.Seconds(),
			IdleWaitSec: o.IdleWait.Seconds(),
			IdleBusyMax: o.IdleBusyMax,
			TunnelMTU:   TunnelMTU,
		},
		Metrics: []Metric{MetricThroughput, MetricRetransmits, MetricTunnelCPU, MetricSenderCPU, MetricReceiverCPU, MetricHostBusy},
	}

	systems, err := upAll(ctx, o)
	defer func() {
		for _, s := range slices.Backward(systems) {
			fmt.Fprintf(o.Progress, "tearing down %s\n", s.Info().Name)
			if cerr := s.Close(); cerr != nil {
				fmt.Fprintf(o.Progress, "  teardown of %s: %v\n", s.Info().Name, cerr)
			}
		}
	}()
	if err != nil {
		return nil, err
	}
	for _, s := range systems {
		res.Systems = append(res.Systems, s.Info())
	}

	sched := Schedule(len(systems), o.Reps)
	for i, slot := range sched {
		s := systems[slot.System]
		step := fmt.Sprintf("[%d/%d] %s rep %d:", i+1, len(sched), s.Info().Name, slot.Rep)
		m, err := measure(ctx, o, s, slot.Rep, i+1)
		if err != nil {
			fmt.Fprintln(o.Progress, step, "interrupted")
			res.Interrupted = true
			break
		}
		res.Runs = append(res.Runs, m)
		line := m.progressLine()
		if m.IdleGaveUp {
			line += fmt.Sprintf(" (host still %.0f%% busy after waiting %s; measured anyway)", m.IdleBefore, o.IdleWait)
		}
		fmt.Fprintln(o.Progress, step, line)
	}
	res.Finished = time.Now().UTC()
	res.summarize()
	for _, c := range comparisons(res.Systems) {
		res.compare(c.Metric, c.System, c.Baseline, c.Target)
	}
	if _, err := res.WriteJSON(o.OutDir); err != nil {
		return res, err
	}
	if err := res.WriteMarkdown(o.OutDir); err != nil {
		return res, err
	}
	if res.Interrupted {
		return res, fmt.Errorf("perf: interrupted after %d of %d measurements: %w", len(res.Runs), len(sched), ctx.Err())
	}
	return res, nil
}

// workload describes the traffic of the run.
func (o *ThroughputOptions) workload() string {
	w := "iperf3 TCP, one flow, client pod in c1 to server pod in c2"
	if o.Globalnet {
		w += " (Globalnet systems: client pod in g1 to a headless-service pod of g2, reached at its global IP)"
	}
	return w
}

// comparisons returns the throughput comparisons of a run of systems, their
// ratios left to fill in: every Snorkel system without Globalnet against
// every baseline (WireGuard against wireguard-go with WireGuardTarget), and
// every Globalnet system against Snorkel over the same transport without
// Globalnet, with GlobalnetTarget.
func comparisons(systems []SystemInfo) []Comparison {
	var out []Comparison
	for _, s := range systems {
		if s.Kind != KindSnorkel {
			continue
		}
		for _, b := range systems {
			target := 0.0
			switch {
			case s.Globalnet && b.Kind == KindSnorkel && !b.Globalnet && b.Transport == s.Transport:
				target = GlobalnetTarget
			case !s.Globalnet && b.Kind == KindBaseline:
				if s.Transport == gateway.TransportWireGuard && b.Name == BaselineWireGuardGo {
					target = WireGuardTarget
				}
			default:
				continue
			}
			out = append(out, Comparison{Metric: MetricThroughput.Name, System: s.Name, Baseline: b.Name, Target: target})
		}
	}
	return out
}

// upAll brings up every system, each with its own prefix and state
// directory. On failure it returns those already up, for the caller to
// close.
func upAll(ctx context.Context, o ThroughputOptions) ([]System, error) {
	var systems []System
	for _, st := range o.setups() {
		env := Env{
			StateDir: filepath.Join(o.StateDir, st.Tag),
			Prefix:   o.Prefix + st.Tag + "-",
			Binary:   o.Binary,
			Progress: o.Progress,
		}
		fmt.Fprintf(o.Progress, "bringing up %s (namespaces %s*, state %s)\n", st.Name, env.Prefix, env.StateDir)
		s, err := st.Up(ctx, env)
		if err != nil {
			return systems, fmt.Errorf("perf: bring up %s: %w", st.Name, err)
		}
		systems = append(systems, s)
		p := s.Path()
		if err := waitReachable(ctx, p); err != nil {
			return systems, fmt.Errorf("perf: %s: %w", st.Name, err)
		}
		if _, err := startIperfServer(ctx, s.Topology(), p.Server, p.ServerIP); err != nil {
			return systems, fmt.Errorf("perf: %s: %w", st.Name, err)
		}
		fmt.Fprintf(o.Progress, "  %s ready: %s -> %s, tunnel processes %s\n", st.Name, p.Client, p.ServerAddr, describeProcesses(s.TunnelProcesses()))
	}
	return systems, nil
}

// waitReachable pings the server from the client until it answers, which
// also completes any tunnel handshake before the first measurement.
func waitReachable(ctx context.Context, p Path) error {
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, err := p.Client.Run(ctx, "ping", "-c", "1", "-W", "1", p.ServerAddr.String())
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s does not answer ping from %s after 20s: %w", p.ServerAddr, p.Client, err)
		}
		if err := sleep(ctx, 200*time.Millisecond); err != nil {
			return err
		}
	}
}

func describeProcesses(ps []*topo.Process) string {
	if len(ps) == 0 {
		return "none"
	}
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = fmt.Sprintf("%s (pid %d)", p.Name, p.PID)
	}
	return strings.Join(s, ", ")
}

// measure runs one repetition. It returns an error only when ctx ends; a
// failed measurement is returned with its Error set.
func measure(ctx context.Context, o ThroughputOptions, s System, rep, order int) (Measurement, error) {
	name := s.Info().Name
	m := Measurement{System: name, Rep: rep, Order: order}
	idle, err := waitIdle(ctx, o.IdleBusyMax, o.IdleWait)
	if err != nil {
		return m, err
	}
	m.IdleBefore, m.IdleWaitSec, m.IdleGaveUp, m.LoadAvg1 = idle.Busy, idle.Waited.Seconds(), idle.GaveUp, loadAvg1()

	procs := s.TunnelProcesses()
	ticks0 := make([]uint64, len(procs))
	tickErr := make([]error, len(procs))
	for i, p := range procs {
		ticks0[i], tickErr[i] = processTicks(p.PID)
	}
	type profiles struct {
		b   map[string][]byte
		err error
	}
	var profc chan profiles
	if pr, ok := s.(Profiler); ok && o.CPUProfile {
		profc = make(chan profiles, 1)
		// Leave the flow's first second (slow start) and its last out.
		secs := max(1, int(o.Duration/time.Second)-2)
		go func() {
			if err := sleep(ctx, time.Second); err != nil {
				profc <- profiles{err: err}
				return
			}
			b, err := pr.Profile(ctx, secs)
			profc <- profiles{b, err}
		}()
	}

	host0, herr := readHostCPU()
	m.Start = time.Now().UTC()
	t0 := time.Now()
	out, runErr := runIperfTCP(ctx, s.Path().Client, s.Path().ServerAddr, o.Duration)
	elapsed := time.Since(t0)
	host1, herr1 := readHostCPU()
	m.Seconds = elapsed.Seconds()
	for i, p := range procs {
		t1, err := processTicks(p.PID)
		if err != nil || tickErr[i] != nil {
			continue
		}
		m.Processes = append(m.Processes, ProcessCPU{Name: p.Name, PID: p.PID, Percent: 100 * float64(t1-ticks0[i]) / userHZ / elapsed.Seconds()})
	}
	if profc != nil {
		pr := <-profc
		for _, k := range slices.Sorted(maps.Keys(pr.b)) {
			rel := filepath.Join("profiles", fmt.Sprintf("%s-%s-rep%d.pprof", name, k, rep))
			if err := os.MkdirAll(filepath.Join(o.OutDir, "profiles"), 0o755); err == nil {
				if os.WriteFile(filepath.Join(o.OutDir, rel), pr.b[k], 0o644) == nil {
					m.Profiles = append(m.Profiles, rel)
				}
			}
		}
		if pr.err != nil && ctx.Err() == nil {
			m.ProfileError = pr.err.Error()
		}
	}
	if ctx.Err() != nil {
		return m, ctx.Err()
	}

	if len(out) > 0 {
		rel := filepath.Join("raw", fmt.Sprintf("%s-rep%d.json", name, rep))
		if os.WriteFile(filepath.Join(o.OutDir, rel), out, 0o644) == nil {
			m.Raw = rel
		}
	}
	r, perr := ParseIperfTCP(out)
	if perr != nil {
		// iperf3's own message, from its JSON, says more than its exit
		// status.
		m.Error = errors.Join(perr, runErr).Error()
		return m, nil
	}
	m.Values = r.values()
	if len(m.Processes) > 0 {
		total := 0.0
		for _, p := range m.Processes {
			total += p.Percent
		}
		m.Values[MetricTunnelCPU.Name] = total
	}
	if herr == nil && herr1 == nil {
		m.Values[MetricHostBusy.Name] = host1.busySince(host0)
	}
	return m, nil
}

// progressLine is the one-line account of a measurement.
func (m Measurement) progressLine() string {
	if m.Error != "" {
		return "FAILED: " + m.Error
	}
	s := fmt.Sprintf("%.2f Gb/s, %d retransmits", m.Values[MetricThroughput.Name]/1e9, int(m.Values[MetricRetransmits.Name]))
	if v, ok := m.Values[MetricTunnelCPU.Name]; ok {
		var per []string
		for _, p := range m.Processes {
			per = append(per, fmt.Sprintf("%.0f", p.Percent))
		}
		s += fmt.Sprintf(", tunnel CPU %.0f%% (%s)", v, strings.Join(per, "+"))
	}
	s += fmt.Sprintf(", host %.0f%% busy (before %.0f%%)", m.Values[MetricHostBusy.Name], m.IdleBefore)
	if m.ProfileError != "" {
		s += "; profile failed: " + m.ProfileError
	}
	return s
}
