package perf

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/snorkel-net/snorkel/lab/topo"
	"github.com/snorkel-net/snorkel/perf/perfstat"
)

// Counters of the Linux perf tool (`perf stat`) over the single-flow TCP
// measurement: attached to each tunnel process, or over the whole host
// where the kernel carries the traffic and no process does. Software
// counters exist everywhere; cycles and instructions need a PMU, which a
// VM often lacks, and perf then says "<not supported>".

// perfStatEvents are the events counted, the software ones first.
var perfStatEvents = []string{"task-clock", "context-switches", "cpu-migrations", "page-faults", "cycles", "instructions"}

// Scopes of a PerfStat.
const (
	PerfScopeProcesses = "tunnel processes"
	PerfScopeHost      = "whole host"
)

// PerfStat is what `perf stat` counted during a measurement.
type PerfStat struct {
	// Scope is PerfScopeProcesses (the tunnel processes, each attached by
	// PID) or PerfScopeHost (every CPU: the kernel carries the traffic,
	// and the traffic tools and the harness are counted too).
	Scope string `json:"scope"`
	// Counters are the counts summed over the processes by event name;
	// task-clock is in milliseconds.
	Counters map[string]float64 `json:"counters,omitempty"`
	// Unsupported are the events perf could not count here.
	Unsupported []string `json:"unsupported,omitempty"`
	// Raw is perf's output, relative to the output directory.
	Raw string `json:"raw,omitempty"`
	// Error says why there are no counters.
	Error string `json:"error,omitempty"`
}

// perfStatRun is `perf stat` running over a measurement: one perf per
// tunnel process, or one over the whole host.
type perfStatRun struct {
	scope  string
	names  []string // a heading per perf
	cmds   []*exec.Cmd
	output []*bytes.Buffer
}

// startPerfStat attaches perf stat to each of procs, or counts the whole
// host when there are none.
func startPerfStat(ctx context.Context, procs []*topo.Process) (*perfStatRun, error) {
	bin, err := exec.LookPath("perf")
	if err != nil {
		return nil, fmt.Errorf("perf stat: the perf tool is not installed (linux-perf): %w", err)
	}
	base := []string{"stat", "-x,", "-e", strings.Join(perfStatEvents, ",")}
	r := &perfStatRun{scope: PerfScopeProcesses}
	var argss [][]string
	if len(procs) == 0 {
		r.scope = PerfScopeHost
		r.names = append(r.names, "whole host (perf stat -a)")
		argss = append(argss, append(slices.Clone(base), "-a"))
	}
	for _, p := range procs {
		r.names = append(r.names, fmt.Sprintf("%s (pid %d)", p.Name, p.PID))
		argss = append(argss, append(slices.Clone(base), "-p", strconv.Itoa(p.PID)))
	}
	for i, args := range argss {
		cmd := exec.CommandContext(ctx, bin, args...)
		var out bytes.Buffer
		// perf stat writes its counters, and its complaints, to stderr.
		cmd.Stderr = &out
		if err := cmd.Start(); err != nil {
			r.kill()
			return nil, fmt.Errorf("perf stat for %s: %w", r.names[i], err)
		}
		r.cmds = append(r.cmds, cmd)
		r.output = append(r.output, &out)
	}
	// An interrupt before perf has its counters open ends it with
	// nothing printed; perf installs its handler before it opens them.
	for _, c := range r.cmds {
		if err := waitPerfEvents(ctx, c.Process.Pid); err != nil {
			r.kill()
			return nil, err
		}
	}
	return r, nil
}

// perfReadyWait bounds the wait for perf to open its counters; a perf
// that does not has failed, and says why when it is stopped.
const perfReadyWait = 10 * time.Second

// waitPerfEvents waits until process pid has a perf event open, has
// exited, or for perfReadyWait.
func waitPerfEvents(ctx context.Context, pid int) error {
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	deadline := time.Now().Add(perfReadyWait)
	for time.Now().Before(deadline) {
		if stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err != nil || bytes.Contains(stat, []byte(") Z ")) {
			return nil
		}
		fds, _ := os.ReadDir(dir)
		for _, fd := range fds {
			if l, _ := os.Readlink(filepath.Join(dir, fd.Name())); l == "anon_inode:[perf_event]" {
				return nil
			}
		}
		if err := sleep(ctx, 10*time.Millisecond); err != nil {
			return err
		}
	}
	return nil
}

// kill ends every perf started, without waiting for counters.
func (r *perfStatRun) kill() {
	for _, c := range r.cmds {
		c.Process.Kill()
		c.Wait()
	}
}

// stop interrupts every perf, which then prints its counters, and sums
// them. It saves perf's output under rel in dir whether or not the
// counters could be read.
func (r *perfStatRun) stop(dir, rel string) *PerfStat {
	ps := &PerfStat{Scope: r.scope}
	var raw bytes.Buffer
	var errs []error
	counters := map[string]float64{}
	unsupported := map[string]bool{}
	for i, c := range r.cmds {
		c.Process.Signal(os.Interrupt)
		done := make(chan error, 1)
		go func() { done <- c.Wait() }()
		var werr error
		select {
		case werr = <-done:
		case <-time.After(10 * time.Second):
			c.Process.Kill()
			werr = fmt.Errorf("no counters 10 s after the interrupt: %w", <-done)
		}
		out := r.output[i].Bytes()
		fmt.Fprintf(&raw, "# %s: %s\n%s\n", r.names[i], strings.Join(c.Args, " "), bytes.TrimSpace(out))
		cs, err := perfstat.Parse(out)
		if err != nil {
			if werr != nil {
				err = fmt.Errorf("%w (perf: %v)", err, werr)
			}
			errs = append(errs, fmt.Errorf("perf stat for %s: %w: %s", r.names[i], err, firstLine(out)))
			continue
		}
		for _, pc := range cs {
			if pc.Supported {
				counters[pc.Event] += pc.Value
			} else {
				unsupported[pc.Event] = true
			}
		}
	}
	if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, rel)), 0o755); err == nil {
		if os.WriteFile(filepath.Join(dir, rel), raw.Bytes(), 0o644) == nil {
			ps.Raw = rel
		}
	}
	if len(errs) > 0 {
		// Counters of some of the processes would pass for the system's.
		msgs := make([]string, len(errs))
		for i, e := range errs {
			msgs[i] = e.Error()
		}
		ps.Error = strings.Join(msgs, "; ")
		return ps
	}
	for e := range unsupported {
		if _, ok := counters[e]; !ok {
			ps.Unsupported = append(ps.Unsupported, e)
		}
	}
	slices.Sort(ps.Unsupported)
	ps.Counters = counters
	return ps
}

// firstLine is the first non-empty line of b, for an error message.
func firstLine(b []byte) string {
	for line := range strings.Lines(string(b)) {
		if l := strings.TrimSpace(line); l != "" {
			return l
		}
	}
	return "(no output)"
}

// perfCounterMetrics maps the counters to the metrics they give per byte
// of TCP payload, and the scale from count per byte.
var perfCounterMetrics = []struct {
	event  string
	metric Metric
	scale  float64
}{
	{"context-switches", MetricCtxSwitchesPerGB, 1e9},
	{"cpu-migrations", MetricMigrationsPerGB, 1e9},
	{"page-faults", MetricPageFaultsPerGB, 1e9},
	{"instructions", MetricInstructionsPerByte, 1},
	{"cycles", MetricCyclesPerByte, 1},
}

// addPerfStat adds the counters' metrics to a measurement that moved TCP
// payload: counts per second of the measurement over bytes per second,
// as the CPU cost is.
func (m *Measurement) addPerfStat(ps *PerfStat, seconds float64) {
	m.PerfStat = ps
	bps := m.Values[MetricThroughput.Name]
	if ps.Error != "" || bps <= 0 || seconds <= 0 {
		return
	}
	bytesPerSec := bps / 8
	if tc, ok := ps.Counters["task-clock"]; ok {
		m.Values[MetricPerfCPUPerGbit.Name] = (tc / 1e3 / seconds) / (bps / 1e9)
	}
	for _, c := range perfCounterMetrics {
		if v, ok := ps.Counters[c.event]; ok {
			m.Values[c.metric.Name] = v / seconds / bytesPerSec * c.scale
		}
	}
}
