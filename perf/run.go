package perf

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/snorkel-net/snorkel/lab/topo"
	"github.com/snorkel-net/snorkel/perf/udpsearch"
	"github.com/snorkel-net/snorkel/transport"
)

// Baselines that Options.Baselines takes.
const (
	BaselineVeth        = "veth"
	BaselineKernelVXLAN = "kernel-vxlan"
	BaselineWireGuardGo = "wireguard-go"
	BaselineStrongSwan  = "strongswan"
)

// BaselineNames lists the baselines in the order they are set up.
var BaselineNames = []string{BaselineVeth, BaselineKernelVXLAN, BaselineWireGuardGo, BaselineStrongSwan}

// baselineAliases are older names of baselines, still accepted.
var baselineAliases = map[string]string{"kernel": BaselineVeth}

// TunnelMTU is the inner MTU of Snorkel's WireGuard path on a 1500-byte
// underlay (1500 minus 60 bytes of IPv4, UDP and WireGuard headers), which
// the wireguard-go baseline is given too.
const TunnelMTU = 1440

// Defaults of Options.
const (
	DefaultBenchStateDir = "/run/snorkel-bench"
	DefaultBenchPrefix   = "snb-"
)

// Options configures Run.
type Options struct {
	// Benchmark is BenchmarkThroughput, BenchmarkLatency or BenchmarkAll;
	// default throughput.
	Benchmark string
	// Transports are the Snorkel transports to measure (transport.Kinds).
	Transports []string
	// Globalnet adds, for every transport, Snorkel over it between
	// clusters joined by Globalnet (GlobalnetSetup).
	Globalnet bool
	// Baselines are the other systems to measure (BaselineNames).
	Baselines []string
	// Reps is the number of repetitions of each workload on each system;
	// default 3.
	Reps int
	// Duration is how long each measurement sends, in whole seconds;
	// default 10s.
	Duration time.Duration
	// UDPRate is the highest rate, in datagrams per second, the UDP
	// workload's search tries; 0 takes it from an unpaced probe.
	UDPRate float64
	// OutDir receives results.json, report.md, the plots and the raw tool
	// output; it is created.
	OutDir string
	// StateDir holds each system's lab state in a subdirectory; default
	// DefaultBenchStateDir.
	StateDir string
	// Prefix starts every namespace name, followed by a short tag per
	// system; default DefaultBenchPrefix. At most 9 characters, since
	// interface names carry it too.
	Prefix string
	// Binary is the snorkel binary gateways and traffic tools run from;
	// default os.Executable().
	Binary string
	// WireGuardGo is the wireguard-go binary; default FindWireGuardGo().
	WireGuardGo string
	// IdleWait bounds the wait before each measurement for the host to be
	// at most IdleBusyMax percent busy; defaults 60s and 25. A negative
	// IdleWait measures at once, without sampling the host first.
	IdleWait    time.Duration
	IdleBusyMax float64
	// CPUProfile records a CPU profile of every tunnel process that
	// serves one (Snorkel's gateways) during each repetition of the
	// single-flow TCP workload and of the UDP search (profiled).
	CPUProfile bool
	// PerfStat counts with `perf stat` during each repetition of the
	// single-flow TCP workload: attached to every tunnel process, or over
	// the whole host for a system the kernel carries.
	PerfStat bool
	// Command is the command line recorded in the report.
	Command string
	// Progress receives a line per step; nil discards them.
	Progress io.Writer
}

func (o *Options) applyDefaults() {
	if o.Benchmark == "" {
		o.Benchmark = BenchmarkThroughput
	}
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
	for i, b := range o.Baselines {
		if n, ok := baselineAliases[b]; ok {
			o.Baselines[i] = n
		}
	}
}

// validate reports every problem with the options, each naming its flag.
func (o *Options) validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if !validBenchmark(o.Benchmark) {
		bad("benchmark %q: use one of %s", o.Benchmark, strings.Join(Benchmarks, ", "))
	}
	for _, t := range o.Transports {
		if !slices.Contains(transport.Kinds, t) {
			bad("transport %q: use one of %s", t, strings.Join(transport.Kinds, ", "))
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
		bad("globalnet: it adds a Globalnet system per Snorkel transport, and transport is none; give a transport (%s or all) or drop globalnet", strings.Join(transport.Kinds, ", "))
	}
	if o.Reps < 1 {
		bad("reps %d: give at least 1", o.Reps)
	}
	if o.Duration < time.Second || o.Duration%time.Second != 0 {
		bad("duration %s: give a whole number of seconds, at least 1s (iperf3 -t takes seconds)", o.Duration)
	}
	if o.UDPRate < 0 {
		bad("udp-rate %g: give the highest rate the UDP search tries, in datagrams per second, or 0 to take it from an unpaced probe", o.UDPRate)
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
// then the baselines in BaselineNames order.
func (o *Options) setups() []Setup {
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
		case BaselineVeth:
			out = append(out, VethSetup())
		case BaselineKernelVXLAN:
			out = append(out, KernelVXLANSetup())
		case BaselineWireGuardGo:
			out = append(out, WireGuardGoSetup(o.WireGuardGo, TunnelMTU))
		case BaselineStrongSwan:
			out = append(out, StrongSwanSetup())
		}
	}
	return out
}

// topology describes where the traffic of the run goes.
func (o *Options) topology() string {
	t := "two clusters of the lab, each a gateway node and pods in network namespaces on one host, the gateway nodes joined by an underlay bridge; traffic from the first pod of c1 to the first pod of c2"
	if o.Globalnet {
		t += " (Globalnet systems: from a g1 pod to a headless-service pod of g2, reached at its global IP, both gateways translating)"
	}
	return t
}

// Run measures the workloads of o.Benchmark between a pod of one cluster
// and a pod of another through every system the options name: it brings
// all of them up, measures them in interleaved rounds, tears them down,
// and writes results.json, report.md and the plots to OutDir. A baseline
// that cannot run here is reported as unavailable, with the reason. Run
// returns the results also when some measurements failed (they carry
// their error); it returns an error when a Snorkel system cannot be
// brought up, or with the partial results when ctx is cancelled.
func Run(ctx context.Context, o Options) (*Results, error) {
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
	if err := os.MkdirAll(filepath.Join(o.OutDir, "raw"), 0o755); err != nil {
		return nil, fmt.Errorf("perf: output directory: %w", err)
	}
	workloads := WorkloadsOf(o.Benchmark)
	res := &Results{
		Benchmark: o.Benchmark,
		Command:   o.Command,
		Started:   time.Now().UTC(),
		Machine:   ReadMachine(ctx),
		Settings: Settings{
			Reps:         o.Reps,
			DurationSec:  o.Duration.Seconds(),
			IdleWaitSec:  o.IdleWait.Seconds(),
			IdleBusyMax:  o.IdleBusyMax,
			UDPRate:      o.UDPRate,
			UDPTrialSec:  udpsearch.TrialTime(o.Duration).Seconds(),
			UDPMaxLoss:   udpsearch.MaxLoss,
			UDPMaxTrials: udpsearch.MaxTrials,
			PerfStat:     o.PerfStat,
			Topology:     o.topology(),
		},
		Workloads: workloads,
	}

	_, serr := os.Stat(o.StateDir)
	madeStateDir := errors.Is(serr, os.ErrNotExist)
	systems, infos, err := upAll(ctx, o, workloads)
	defer func() {
		for _, s := range slices.Backward(systems) {
			fmt.Fprintf(o.Progress, "tearing down %s\n", s.Info().Name)
			if cerr := s.Close(); cerr != nil {
				fmt.Fprintf(o.Progress, "  teardown of %s: %v\n", s.Info().Name, cerr)
			}
		}
		// The state directory the run made goes with the systems' own;
		// one that still holds something (a teardown that failed) stays.
		if madeStateDir {
			_ = os.Remove(o.StateDir)
		}
	}()
	if err != nil {
		return nil, err
	}
	res.Systems = infos

	sched := Schedule(len(systems), o.Reps)
	total := len(sched) * len(workloads)
	n := 0
run:
	for _, slot := range sched {
		s := systems[slot.System]
		for _, w := range workloads {
			n++
			step := fmt.Sprintf("[%d/%d] %s rep %d %s:", n, total, s.Info().Name, slot.Rep, w.Name)
			m, err := measure(ctx, o, s, w, slot.Rep, n)
			if err != nil {
				fmt.Fprintln(o.Progress, step, "interrupted")
				res.Interrupted = true
				break run
			}
			res.Runs = append(res.Runs, m)
			line := m.progressLine(w)
			if m.IdleGaveUp {
				line += fmt.Sprintf(" (host still %.0f%% busy after waiting %s; measured anyway)", m.IdleBefore, o.IdleWait)
			}
			fmt.Fprintln(o.Progress, step, line)
		}
	}
	res.Finished = time.Now().UTC()
	if err := res.Finish(o.OutDir); err != nil {
		return res, err
	}
	if res.Interrupted {
		return res, fmt.Errorf("perf: interrupted after %d of %d measurements: %w", len(res.Runs), total, ctx.Err())
	}
	return res, nil
}

// Finish summarises the measurements, compares the systems and writes
// results.json, report.md and the plots to dir.
func (r *Results) Finish(dir string) error {
	r.summarize()
	r.Comparisons = nil
	for _, c := range comparisons(r.Systems, r.Workloads) {
		r.compare(c.Workload, c.Metric, c.System, c.Baseline, c.Target)
	}
	plots, err := r.WritePlots(dir)
	if err != nil {
		return err
	}
	r.Plots = plots
	if _, err := r.WriteJSON(dir); err != nil {
		return err
	}
	return r.WriteMarkdown(dir)
}

// upAll brings up every system, each with its own prefix and state
// directory, and starts the traffic servers the workloads need. It
// returns the systems that are up and the description of every system,
// unavailable ones too. A baseline that cannot run is reported
// unavailable; a Snorkel system that cannot is an error, returned with
// the systems already up for the caller to close.
func upAll(ctx context.Context, o Options, workloads []Workload) ([]System, []SystemInfo, error) {
	var systems []System
	var infos []SystemInfo
	for _, st := range o.setups() {
		env := Env{
			StateDir: filepath.Join(o.StateDir, st.Tag),
			Prefix:   o.Prefix + st.Tag + "-",
			Binary:   o.Binary,
			Progress: o.Progress,
		}
		if st.Check != nil {
			if err := st.Check(); err != nil {
				fmt.Fprintf(o.Progress, "%s unavailable: %v\n", st.Name, err)
				infos = append(infos, SystemInfo{Name: st.Name, Kind: st.Kind, Unavailable: err.Error()})
				continue
			}
		}
		fmt.Fprintf(o.Progress, "bringing up %s (namespaces %s*, state %s)\n", st.Name, env.Prefix, env.StateDir)
		s, err := upOne(ctx, st, env, workloads)
		if err != nil {
			if st.Kind == KindSnorkel || ctx.Err() != nil {
				return systems, infos, fmt.Errorf("perf: %s: %w", st.Name, err)
			}
			fmt.Fprintf(o.Progress, "%s unavailable: %v\n", st.Name, err)
			infos = append(infos, SystemInfo{Name: st.Name, Kind: st.Kind, Unavailable: err.Error()})
			continue
		}
		systems = append(systems, s)
		infos = append(infos, s.Info())
		p := s.Path()
		fmt.Fprintf(o.Progress, "  %s ready: %s -> %s, tunnel processes %s\n", st.Name, p.Client, p.ServerAddr, describeProcesses(s.TunnelProcesses()))
	}
	return systems, infos, nil
}

// upOne brings up one system, waits until its path carries traffic and
// starts its traffic servers; on failure it closes what it built.
func upOne(ctx context.Context, st Setup, env Env, workloads []Workload) (System, error) {
	s, err := st.Up(ctx, env)
	if err != nil {
		return nil, err
	}
	if err := startServers(ctx, s, env.Binary, workloads); err != nil {
		return nil, errors.Join(err, s.Close())
	}
	return s, nil
}

// startServers waits for the path to carry ping, then starts the traffic
// servers the workloads need in the server pod.
func startServers(ctx context.Context, s System, binary string, workloads []Workload) error {
	p := s.Path()
	if err := waitReachable(ctx, p); err != nil {
		return err
	}
	need := map[string]bool{}
	for _, w := range workloads {
		need[w.Name] = true
	}
	t, ns, ip := s.Topology(), p.Server, p.ServerIP.String()
	if need[WorkloadTCP1] || need[WorkloadTCP1Rev] || need[WorkloadTCP10] || need[WorkloadTCP10Rev] {
		if _, err := startServer(ctx, t, ns, "iperf3-server", iperfPort, "iperf3", "-s", "-B", ip, "-p", strconv.Itoa(iperfPort)); err != nil {
			return err
		}
	}
	if need[WorkloadRR] {
		addr := netip.AddrPortFrom(p.ServerIP, rrPort).String()
		if _, err := startServer(ctx, t, ns, "rr-server", rrPort, binary, "perf-pod", "rr-server", "--listen", addr); err != nil {
			return err
		}
	}
	if need[WorkloadUDP] {
		addr := netip.AddrPortFrom(p.ServerIP, udpPort).String()
		if _, err := startServer(ctx, t, ns, "udp-sink", udpPort, binary, "perf-pod", "udp-sink", "--listen", addr); err != nil {
			return err
		}
	}
	return nil
}

// waitReachable pings the server from the client until it answers, which
// also completes any tunnel handshake before the first measurement.
func waitReachable(ctx context.Context, p Path) error {
	const limit = 30 * time.Second
	deadline := time.Now().Add(limit)
	for {
		_, err := p.Client.Run(ctx, "ping", "-c", "1", "-W", "1", p.ServerAddr.String())
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s does not answer ping from %s after %s: %w", p.ServerAddr, p.Client, limit, err)
		}
		if err := sleep(ctx, 200*time.Millisecond); err != nil {
			return err
		}
	}
}

func describeProcesses(ps []*topo.Process) string {
	if len(ps) == 0 {
		return "none (kernel data path)"
	}
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = fmt.Sprintf("%s (pid %d)", p.Name, p.PID)
	}
	return strings.Join(s, ", ")
}
