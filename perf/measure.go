package perf

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// measure runs one repetition of workload w on system s, sampling the
// tunnel processes' CPU and memory and the host's CPU around it. It
// returns an error only when ctx ends; a failed measurement is returned
// with its Error set.
func measure(ctx context.Context, o Options, s System, w Workload, rep, order int) (Measurement, error) {
	name := s.Info().Name
	m := Measurement{System: name, Workload: w.Name, Rep: rep, Order: order}
	if o.IdleWait >= 0 {
		idle, err := waitIdle(ctx, o.IdleBusyMax, o.IdleWait)
		if err != nil {
			return m, err
		}
		m.IdleBefore, m.IdleWaitSec, m.IdleGaveUp = idle.Busy, idle.Waited.Seconds(), idle.GaveUp
	}
	m.LoadAvg1 = loadAvg1()

	procs := s.TunnelProcesses()
	ticks0 := make([]uint64, len(procs))
	tickErr := make([]error, len(procs))
	for i, p := range procs {
		ticks0[i], tickErr[i] = processTicks(p.PID)
	}
	var profc chan profiles
	if pr, ok := s.(Profiler); ok && o.CPUProfile && profiled(w) {
		profc = make(chan profiles, 1)
		go profile(ctx, pr, o.Duration, profc)
	}

	var stat *perfStatRun
	var statErr error
	if o.PerfStat && w.Name == WorkloadTCP1 {
		stat, statErr = startPerfStat(ctx, procs)
	}

	host0, herr := readHostCPU()
	m.Start = time.Now().UTC()
	t0 := time.Now()
	values, out, runErr := w.run(ctx, runEnv{path: s.Path(), duration: o.Duration, binary: o.Binary, udpRate: o.UDPRate})
	elapsed := time.Since(t0)
	host1, herr1 := readHostCPU()
	var ps *PerfStat
	switch {
	case statErr != nil:
		ps = &PerfStat{Scope: PerfScopeProcesses, Error: statErr.Error()}
		if len(procs) == 0 {
			ps.Scope = PerfScopeHost
		}
	case stat != nil && ctx.Err() != nil:
		stat.kill()
	case stat != nil:
		ps = stat.stop(o.OutDir, filepath.Join("perfstat", fmt.Sprintf("%s-%s-rep%d.txt", name, w.Name, rep)))
	}
	m.Seconds = elapsed.Seconds()
	for i, p := range procs {
		t1, err := processTicks(p.PID)
		if err != nil || tickErr[i] != nil {
			continue
		}
		pc := ProcessCPU{Name: p.Name, PID: p.PID, Percent: 100 * float64(t1-ticks0[i]) / userHZ / elapsed.Seconds()}
		pc.PeakRSS, _ = processPeakRSS(p.PID)
		m.Processes = append(m.Processes, pc)
	}
	if profc != nil {
		m.saveProfiles(<-profc, o.OutDir, ctx.Err() != nil)
	}
	if ctx.Err() != nil {
		return m, ctx.Err()
	}
	if len(out) > 0 {
		rel := filepath.Join("raw", fmt.Sprintf("%s-%s-rep%d.%s", name, w.Name, rep, w.rawExt))
		if os.WriteFile(filepath.Join(o.OutDir, rel), out, 0o644) == nil {
			m.Raw = rel
		}
	}
	if runErr != nil {
		m.Error = runErr.Error()
		m.PerfStat = ps
		return m, nil
	}
	m.Values = values
	m.addCost()
	if ps != nil {
		m.addPerfStat(ps, elapsed.Seconds())
	}
	if herr == nil && herr1 == nil {
		m.Values[MetricHostBusy.Name] = host1.busySince(host0)
		m.Values[MetricHostSteal.Name] = host1.stealSince(host0)
	}
	return m, nil
}

// addCost adds the tunnel processes' CPU, its cost per gigabit when the
// workload moved TCP payload, and their peak memory.
func (m *Measurement) addCost() {
	if len(m.Processes) == 0 {
		return
	}
	cpu := 0.0
	var rss uint64
	for _, p := range m.Processes {
		cpu += p.Percent
		rss = max(rss, p.PeakRSS)
	}
	m.Values[MetricTunnelCPU.Name] = cpu
	if rss > 0 {
		m.Values[MetricPeakRSS.Name] = float64(rss)
	}
	// CPU seconds per second over gigabits per second: both over the
	// same wall-clock time.
	if bps := m.Values[MetricThroughput.Name]; bps > 0 {
		m.Values[MetricCPUPerGbit.Name] = (cpu / 100) / (bps / 1e9)
	}
}

// profiles are the CPU profiles of a system's tunnel processes by a short
// name.
type profiles struct {
	b   map[string][]byte
	err error
}

// profiled reports whether CPUProfile profiles the gateways during w: the
// single-flow TCP run, where the bytes cost most, and the UDP search,
// where the packets do. A search runs longer than Duration; its profile,
// like any, starts a second in and lasts Duration less two seconds.
func profiled(w Workload) bool { return w.Name == WorkloadTCP1 || w.Name == WorkloadUDP }

// profile records CPU profiles during a measurement of length d, leaving
// out its first second (slow start) and its last.
func profile(ctx context.Context, pr Profiler, d time.Duration, out chan<- profiles) {
	secs := max(1, int(d/time.Second)-2)
	if err := sleep(ctx, time.Second); err != nil {
		out <- profiles{err: err}
		return
	}
	b, err := pr.Profile(ctx, secs)
	out <- profiles{b, err}
}

func (m *Measurement) saveProfiles(p profiles, dir string, cancelled bool) {
	for _, k := range slices.Sorted(maps.Keys(p.b)) {
		rel := filepath.Join("profiles", fmt.Sprintf("%s-%s-%s-rep%d.pprof", m.System, m.Workload, k, m.Rep))
		if err := os.MkdirAll(filepath.Join(dir, "profiles"), 0o755); err == nil {
			if os.WriteFile(filepath.Join(dir, rel), p.b[k], 0o644) == nil {
				m.Profiles = append(m.Profiles, rel)
			}
		}
	}
	if p.err != nil && !cancelled {
		m.ProfileError = p.err.Error()
	}
}

// progressLine is the one-line account of a measurement.
func (m Measurement) progressLine(w Workload) string {
	if m.Error != "" {
		return "FAILED: " + m.Error
	}
	v := m.Values
	s := m.result(w)
	if t, ok := v[MetricTransactions.Name]; ok {
		s += fmt.Sprintf(", %.0f transactions/s", t)
	}
	if c, ok := v[MetricTunnelCPU.Name]; ok {
		var per []string
		for _, p := range m.Processes {
			per = append(per, fmt.Sprintf("%.0f", p.Percent))
		}
		s += fmt.Sprintf(", tunnel CPU %.0f%% (%s)", c, strings.Join(per, "+"))
	}
	if c, ok := v[MetricCPUPerGbit.Name]; ok {
		s += fmt.Sprintf(", %.2f CPU s/Gb", c)
	}
	s += fmt.Sprintf(", host %.0f%% busy (before %.0f%%)", v[MetricHostBusy.Name], m.IdleBefore)
	if st := v[MetricHostSteal.Name]; st >= 0.5 {
		s += fmt.Sprintf(", %.0f%% stolen by the hypervisor", st)
	}
	if c, ok := v[MetricCtxSwitchesPerGB.Name]; ok {
		s += fmt.Sprintf(", %.0f context switches/GB (%s)", c, m.PerfStat.Scope)
	}
	if m.ProfileError != "" {
		s += "; profile failed: " + m.ProfileError
	}
	if m.PerfStat != nil && m.PerfStat.Error != "" {
		s += "; " + m.PerfStat.Error
	}
	return s
}
