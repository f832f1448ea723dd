package perf

import (
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/snorkel-net/snorkel/perf/udpsearch"
)

// kernelCPU stands in a cost cell of a system whose data path is the
// kernel's: its CPU is spent in softirq context, charged to whatever
// process happens to run, and no number would be right.
const kernelCPU = "kernel (not attributable)"

// table is a titled grid of cells with a note under it.
type table struct {
	title string
	head  []string
	rows  [][]string
	note  string
}

// tables returns the run's summary tables: throughput, cost and latency,
// each with a row per system and only the columns of workloads that ran.
func (r *Results) tables() []table {
	var out []table
	tput := table{title: "Throughput", head: []string{"system"},
		note: fmt.Sprintf("Median (min–max) over the repetitions. TCP in Gb/s of payload received; UDP the highest rate, in thousands of %d-byte datagrams per second, "+
			"that a search of paced trials found forwarded with at most %g%% lost (RFC 2544), with the median loss at it; 0 where every rate tried lost more; "+
			"≥ where the source could offer no more (or --udp-rate capped the search) and the system kept up, so it may forward more, and a ratio to it is an upper bound.", udpsearch.Payload, r.udpMaxLoss())}
	cost := table{title: "Cost", head: []string{"system"},
		note: "CPU seconds the tunnel processes of both gateway nodes spent per gigabit delivered, median (min–max); tunnel CPU in % of one core during the single-flow run; peak memory is the largest VmHWM of a tunnel process. " +
			"Where the kernel carries the traffic (veth, kernel vxlan) its CPU is spent in softirq context on whatever runs, and is not attributable."}
	lat := table{title: "Latency", head: []string{"system"},
		note: "Round trips in µs, median over the repetitions of each repetition's percentile; transactions per second with one in flight."}
	has := func(w string) bool { _, ok := r.Workload(w); return ok }
	tcp := []string{}
	for _, w := range r.Workloads {
		if w.Primary == MetricThroughput.Name {
			tcp = append(tcp, w.Name)
			tput.head = append(tput.head, w.Title)
			cost.head = append(cost.head, "CPU s/Gb, "+w.Title)
		}
	}
	if has(WorkloadUDP) {
		tput.head = append(tput.head, fmt.Sprintf("UDP 64 B, kpps at ≤ %g%% loss (loss at it)", r.udpMaxLoss()))
	}
	if len(tcp) > 0 {
		cost.head = append(cost.head, "tunnel CPU, "+r.workloadTitle(tcp[0]))
	}
	cost.head = append(cost.head, "peak memory")
	if has(WorkloadRR) {
		lat.head = append(lat.head, "RR transactions/s", "RR p50", "RR p99", "RR p99.9")
	}
	if has(WorkloadPing) {
		lat.head = append(lat.head, "ping p50", "ping p99", "ping loss")
	}
	for _, s := range r.Systems {
		if s.Unavailable != "" {
			for _, t := range []*table{&tput, &cost, &lat} {
				t.rows = append(t.rows, padRow([]string{s.Name, "unavailable"}, len(t.head)))
			}
			continue
		}
		tr, cr, lr := []string{s.Name}, []string{s.Name}, []string{s.Name}
		for _, w := range tcp {
			tr = append(tr, r.cell(s.Name, w, MetricThroughput.Name, 1e-9, "%.2f", true))
			if s.KernelDataPath {
				cr = append(cr, kernelCPU)
			} else {
				cr = append(cr, r.cell(s.Name, w, MetricCPUPerGbit.Name, 1, "%.2f", true))
			}
		}
		if has(WorkloadUDP) {
			c := r.udpAtBound(s.Name) + r.cell(s.Name, WorkloadUDP, MetricUDPRate.Name, 1e-3, "%.1f", true)
			if l, ok := r.Summary(s.Name, WorkloadUDP, MetricLoss.Name); ok && l.N > 0 {
				c += fmt.Sprintf(", %.3f%% lost", l.Median)
			}
			tr = append(tr, c)
		}
		if len(tcp) > 0 {
			if s.KernelDataPath {
				cr = append(cr, kernelCPU)
			} else {
				cr = append(cr, r.cell(s.Name, tcp[0], MetricTunnelCPU.Name, 1, "%.0f%%", false))
			}
		}
		cr = append(cr, r.peakMemory(s))
		if has(WorkloadRR) {
			lr = append(lr, r.cell(s.Name, WorkloadRR, MetricTransactions.Name, 1, "%.0f", false),
				r.cell(s.Name, WorkloadRR, MetricP50.Name, 1, "%.0f", false),
				r.cell(s.Name, WorkloadRR, MetricP99.Name, 1, "%.0f", false),
				r.cell(s.Name, WorkloadRR, MetricP999.Name, 1, "%.0f", false))
		}
		if has(WorkloadPing) {
			lr = append(lr, r.cell(s.Name, WorkloadPing, MetricP50.Name, 1, "%.0f", false),
				r.cell(s.Name, WorkloadPing, MetricP99.Name, 1, "%.0f", false),
				r.cell(s.Name, WorkloadPing, MetricLoss.Name, 1, "%.1f%%", false))
		}
		tput.rows, cost.rows, lat.rows = append(tput.rows, tr), append(cost.rows, cr), append(lat.rows, lr)
	}
	for _, t := range []table{tput, cost, lat} {
		if len(t.head) > 1 && !(t.title == "Cost" && len(t.head) == 2) {
			out = append(out, t)
		}
	}
	if t, ok := r.perfStatTable(); ok {
		out = append(out, t)
	}
	return out
}

// perfStatTable summarises perf stat's counters of the single-flow TCP
// workload per system, with a column per counter some system had, and
// says why a system has none.
func (r *Results) perfStatTable() (table, bool) {
	type stats struct {
		scope       string
		errs        []string
		unsupported []string
	}
	per := map[string]*stats{}
	any := false
	for _, m := range r.Runs {
		if m.Workload != WorkloadTCP1 || m.PerfStat == nil {
			continue
		}
		any = true
		st := per[m.System]
		if st == nil {
			st = &stats{}
			per[m.System] = st
		}
		if m.PerfStat.Scope != "" {
			st.scope = m.PerfStat.Scope
		}
		if e := m.PerfStat.Error; e != "" && !slices.Contains(st.errs, e) {
			st.errs = append(st.errs, e)
		}
		for _, u := range m.PerfStat.Unsupported {
			if !slices.Contains(st.unsupported, u) {
				st.unsupported = append(st.unsupported, u)
			}
		}
	}
	if !any {
		return table{}, false
	}
	cols := []struct {
		metric Metric
		head   string
		format string
	}{
		{MetricPerfCPUPerGbit, "CPU s/Gb (task-clock)", "%.2f"},
		{MetricCtxSwitchesPerGB, "context switches/GB", "%.0f"},
		{MetricMigrationsPerGB, "CPU migrations/GB", "%.0f"},
		{MetricPageFaultsPerGB, "page faults/GB", "%.0f"},
		{MetricInstructionsPerByte, "instructions/B", "%.1f"},
		{MetricCyclesPerByte, "cycles/B", "%.1f"},
	}
	t := table{title: "Counters (perf stat)", head: []string{"system", "counted on"}}
	var shown []int
	for i, c := range cols {
		for _, s := range r.Systems {
			if sm, ok := r.Summary(s.Name, WorkloadTCP1, c.metric.Name); ok && sm.N > 0 {
				shown = append(shown, i)
				t.head = append(t.head, c.head)
				break
			}
		}
	}
	var notes []string
	var unsupported []string
	for _, s := range r.Systems {
		st := per[s.Name]
		if st == nil {
			continue
		}
		scope := st.scope
		if scope == PerfScopeHost {
			scope += " (not attributable)"
		}
		row := []string{s.Name, scope}
		for _, i := range shown {
			row = append(row, r.cell(s.Name, WorkloadTCP1, cols[i].metric.Name, 1, cols[i].format, true))
		}
		t.rows = append(t.rows, row)
		for _, e := range st.errs {
			notes = append(notes, fmt.Sprintf("%s: %s.", s.Name, e))
		}
		for _, u := range st.unsupported {
			if !slices.Contains(unsupported, u) {
				unsupported = append(unsupported, u)
			}
		}
	}
	t.note = fmt.Sprintf("Counted by perf stat during the single-flow run (%s), per byte of TCP payload delivered, median (min–max). "+
		"%q is every process of the tunnel on both gateway nodes, each attached by PID; %q is every CPU, for a system the kernel carries, and counts the traffic tools and the harness too. "+
		"Raw output in perfstat/.", r.workloadTitle(WorkloadTCP1), PerfScopeProcesses, PerfScopeHost)
	if len(unsupported) > 0 {
		slices.Sort(unsupported)
		t.note += fmt.Sprintf(" Not supported on this machine (no hardware counters): %s.", strings.Join(unsupported, ", "))
	}
	if len(notes) > 0 {
		t.note += " No counters: " + strings.Join(notes, " ")
	}
	return t, true
}

// cell formats a summary: the median scaled and formatted, with the range
// when withRange is set, "-" when nothing was measured, and the failed
// repetitions counted.
func (r *Results) cell(system, workload, metric string, scale float64, format string, withRange bool) string {
	s, ok := r.Summary(system, workload, metric)
	if !ok {
		return "-"
	}
	c := "-"
	if s.N > 0 {
		c = fmt.Sprintf(format, s.Median*scale)
		if withRange && s.N > 1 {
			c += fmt.Sprintf(" (%s–%s)", fmt.Sprintf(format, s.Min*scale), fmt.Sprintf(format, s.Max*scale))
		}
	}
	if s.Failed > 0 {
		c += fmt.Sprintf(" [%d failed]", s.Failed)
	}
	return c
}

// peakMemory is the largest peak RSS any tunnel process of the system
// reached in the run.
func (r *Results) peakMemory(s SystemInfo) string {
	if s.KernelDataPath {
		return "-"
	}
	peak := 0.0
	for _, w := range r.Workloads {
		if m, ok := r.Summary(s.Name, w.Name, MetricPeakRSS.Name); ok && m.N > 0 {
			peak = max(peak, m.Max)
		}
	}
	if peak == 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f MiB", peak/(1<<20))
}

// udpAtBound is "≥ " when a repetition of the system's UDP search found
// the top of its range, so that its rate is a lower bound.
func (r *Results) udpAtBound(system string) string {
	if s, ok := r.Summary(system, WorkloadUDP, MetricUDPAtBound.Name); ok && s.N > 0 && s.Max > 0 {
		return "≥ "
	}
	return ""
}

// udpMaxLoss is the loss the run's UDP search tolerated, in percent.
func (r *Results) udpMaxLoss() float64 {
	if r.Settings.UDPMaxLoss > 0 {
		return r.Settings.UDPMaxLoss
	}
	return udpsearch.MaxLoss
}

func (r *Results) workloadTitle(name string) string {
	if w, ok := r.Workload(name); ok {
		return w.Title
	}
	return name
}

func padRow(row []string, n int) []string {
	for len(row) < n {
		row = append(row, "")
	}
	return row
}

// ratioTable is the comparisons as a grid: a row per system and baseline
// pair, a column per workload.
func (r *Results) ratioTable() table {
	t := table{title: "Ratios", head: []string{"system / baseline", "target"},
		note: "Median over median of the same run; in parentheses the lowest and highest ratio of one round's repetitions. A missed target shows how far short it fell."}
	var workloads []string
	for _, w := range r.Workloads {
		if slices.ContainsFunc(r.Comparisons, func(c Comparison) bool { return c.Workload == w.Name }) {
			workloads = append(workloads, w.Name)
			t.head = append(t.head, w.Title)
		}
	}
	type pair struct{ system, baseline string }
	var pairs []pair
	for _, c := range r.Comparisons {
		if p := (pair{c.System, c.Baseline}); !slices.Contains(pairs, p) {
			pairs = append(pairs, p)
		}
	}
	for _, p := range pairs {
		row := []string{p.system + " / " + p.baseline, "-"}
		for _, w := range workloads {
			cell := "-"
			for _, c := range r.Comparisons {
				if c.System != p.system || c.Baseline != p.baseline || c.Workload != w {
					continue
				}
				if c.Target > 0 {
					row[1] = fmt.Sprintf("≥ %.2f×", c.Target)
				}
				cell = c.verdict()
			}
			row = append(row, cell)
		}
		t.rows = append(t.rows, row)
	}
	return t
}

// verdict is the ratio and its rounds' range with, under a target,
// whether it is met or by how much it falls short.
func (c Comparison) verdict() string {
	s := c.ratio() + c.roundRange()
	switch {
	case c.Target <= 0:
	case c.Met():
		s += " met"
	default:
		s += " MISSED by " + c.shortfall()
	}
	return s
}

// ratio prints the ratio to two decimals, or to three where two would
// round a miss up onto its target.
func (c Comparison) ratio() string {
	s := fmt.Sprintf("%.2f×", c.Ratio)
	if !c.Met() && c.Target > 0 && math.Round(100*c.Ratio) >= math.Round(100*c.Target) {
		s = fmt.Sprintf("%.3f×", c.Ratio)
	}
	return s
}

// roundRange prints the range of the rounds' ratios, " (0.91–1.04)", or
// "" when fewer than two rounds measured both systems.
func (c Comparison) roundRange() string {
	if c.RoundMax == 0 {
		return ""
	}
	return fmt.Sprintf(" (%.2f–%.2f)", c.RoundMin, c.RoundMax)
}

// shortfall prints how far short of its target the comparison falls, in
// whole percent, or "under 1%" where that would print 0.
func (c Comparison) shortfall() string {
	p := 100 * c.Shortfall()
	if p < 0.5 {
		return "under 1%"
	}
	return fmt.Sprintf("%.0f%%", p)
}

// String says the comparison in words.
func (c Comparison) String() string {
	s := fmt.Sprintf("%s / %s, %s (median %s): %s", c.System, c.Baseline, c.Workload, c.Metric, c.ratio())
	if c.RoundMax != 0 {
		s += fmt.Sprintf(", one round's %.2f–%.2f", c.RoundMin, c.RoundMax)
	}
	if c.Target > 0 {
		if c.Met() {
			s += fmt.Sprintf(" (target ≥ %.2f×: met)", c.Target)
		} else {
			s += fmt.Sprintf(" (target ≥ %.2f×: NOT met, %s short)", c.Target, c.shortfall())
		}
	}
	return s
}

// Missed returns the comparisons that fall short of their target.
func (r *Results) Missed() []Comparison {
	var out []Comparison
	for _, c := range r.Comparisons {
		if c.Target > 0 && !c.Met() {
			out = append(out, c)
		}
	}
	return out
}

// WriteTable writes the summary for a terminal: the tables, the ratios,
// and the unavailable systems.
func (r *Results) WriteTable(w io.Writer) error {
	tables := r.tables()
	if len(r.Comparisons) > 0 {
		tables = append(tables, r.ratioTable())
	}
	for _, t := range tables {
		fmt.Fprintf(w, "%s\n", t.title)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, strings.Join(t.head, "\t")+"\t")
		for _, row := range t.rows {
			fmt.Fprintln(tw, strings.Join(row, "\t")+"\t")
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		fmt.Fprintf(w, "%s\n\n", t.note)
	}
	for _, s := range r.Systems {
		if s.Unavailable != "" {
			fmt.Fprintf(w, "%s unavailable: %s\n", s.Name, s.Unavailable)
		}
	}
	_, err := fmt.Fprintf(w, "%d repetitions of %.0f s per workload and system, interleaved; machine: %d CPUs (%s), kernel %s\n",
		r.Settings.Reps, r.Settings.DurationSec, r.Machine.CPUs, r.Machine.CPUModel, r.Machine.Kernel)
	return err
}

// WriteMarkdown writes dir/report.md: the command and the machine, the
// summary tables, the ratios against the targets, the plots, the systems
// and every measurement.
func (r *Results) WriteMarkdown(dir string) error {
	var b strings.Builder
	fmt.Fprintf(&b, "# Snorkel benchmark: %s\n\n", r.Benchmark)
	fmt.Fprintf(&b, "Run %s to %s", r.Started.Format(time.RFC3339), r.Finished.Format(time.RFC3339))
	if r.Interrupted {
		b.WriteString(" — **interrupted**, partial results")
	}
	b.WriteString(".\n\n")
	fmt.Fprintf(&b, "```\n%s\n```\n\n", r.Command)
	fmt.Fprintf(&b, "Machine: %d CPUs (%s), kernel %s, host %s; %s; %s. Every tunnel end, traffic tool and the harness share these CPUs.\n\n",
		r.Machine.CPUs, r.Machine.CPUModel, r.Machine.Kernel, r.Machine.Hostname, r.Machine.GoVersion, r.Machine.Iperf3)
	fmt.Fprintf(&b, "Topology: %s. Repetitions: %d of %.0f s per workload and system, every system up at once and measured in interleaved rounds; before each measurement the host is given up to %.0f s to fall to %.0f%% busy.\n\n",
		r.Settings.Topology, r.Settings.Reps, r.Settings.DurationSec, r.Settings.IdleWaitSec, r.Settings.IdleBusyMax)

	for _, t := range r.tables() {
		fmt.Fprintf(&b, "## %s\n\n", t.title)
		mdTable(&b, t.head, t.rows)
		fmt.Fprintf(&b, "\n%s\n\n", t.note)
	}
	if len(r.Comparisons) > 0 {
		t := r.ratioTable()
		b.WriteString("## Ratios and targets\n\n")
		mdTable(&b, t.head, t.rows)
		fmt.Fprintf(&b, "\n%s\n\n", t.note)
		if missed := r.Missed(); len(missed) > 0 {
			b.WriteString("Missed targets:\n\n")
			for _, c := range missed {
				fmt.Fprintf(&b, "- %s\n", c)
			}
			b.WriteString("\n")
		}
	}
	if len(r.Plots) > 0 {
		b.WriteString("## Plots\n\n")
		for _, p := range r.Plots {
			fmt.Fprintf(&b, "![%s](%s)\n\n", strings.TrimSuffix(filepath.Base(p), ".svg"), filepath.ToSlash(p))
		}
	}

	b.WriteString("## Workloads\n\n")
	for _, w := range r.Workloads {
		fmt.Fprintf(&b, "- **%s** (%s): %s.\n", w.Name, w.Title, w.Description)
	}
	b.WriteString("\n## Systems\n\n")
	for _, s := range r.Systems {
		if s.Unavailable != "" {
			fmt.Fprintf(&b, "- **%s**: unavailable on this machine: %s\n", s.Name, s.Unavailable)
			continue
		}
		fmt.Fprintf(&b, "- **%s** (%s): %s.", s.Name, s.Kind, s.Description)
		if s.TunnelMTU > 0 {
			fmt.Fprintf(&b, " Tunnel MTU %d.", s.TunnelMTU)
		}
		fmt.Fprintf(&b, " Namespaces %s*, client %s, server %s.", s.Prefix, s.Client, s.Server)
		if s.Version != "" {
			fmt.Fprintf(&b, " Version: `%s`.", s.Version)
		}
		b.WriteString("\n")
	}

	b.WriteString("\n## Measurements\n\n")
	var rows [][]string
	for _, m := range r.Runs {
		row := []string{fmt.Sprint(m.Order), m.System, m.Workload, fmt.Sprint(m.Rep), m.Start.Format("15:04:05")}
		w, _ := r.Workload(m.Workload)
		if m.Error != "" {
			row = append(row, "failed: "+m.Error, "", "", "", "")
		} else {
			var per []string
			for _, p := range m.Processes {
				per = append(per, fmt.Sprintf("%s %.0f%%", p.Name, p.Percent))
			}
			row = append(row, m.result(w), strings.Join(per, ", "), fmt.Sprintf("%.0f%%", m.Values[MetricHostBusy.Name]), fmt.Sprintf("%.1f%%", m.Values[MetricHostSteal.Name]), fmt.Sprintf("%.0f%%", m.IdleBefore))
		}
		rows = append(rows, row)
	}
	mdTable(&b, []string{"#", "system", "workload", "rep", "start (UTC)", "result", "tunnel CPU", "host busy", "stolen", "busy before"}, rows)
	b.WriteString("\nEvery value, with each tool's own output per measurement, is in results.json and raw/.\n")

	path := filepath.Join(dir, "report.md")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		return fmt.Errorf("perf: write report: %w", err)
	}
	return nil
}

// result is a measurement's headline numbers.
func (m Measurement) result(w Workload) string {
	v := m.Values
	switch w.Primary {
	case MetricThroughput.Name:
		return fmt.Sprintf("%.2f Gb/s, %.0f retransmits", v[MetricThroughput.Name]/1e9, v[MetricRetransmits.Name])
	case MetricUDPRate.Name:
		trials := fmt.Sprintf("%.0f trials", v[MetricUDPTrials.Name])
		if v[MetricUDPTrials.Name] == 1 {
			trials = "1 trial"
		}
		s := "every rate tried lost more than tolerated, " + trials
		if l, ok := v[MetricLoss.Name]; ok {
			at := ""
			if v[MetricUDPAtBound.Name] > 0 {
				at = "≥ "
			}
			s = fmt.Sprintf("%s%.1f kpps at %.3f%% loss, %s", at, v[MetricUDPRate.Name]/1e3, l, trials)
		}
		if p, ok := v[MetricUDPProbeRx.Name]; ok {
			s += fmt.Sprintf(" (unpaced probe: %.1f kpps received)", p/1e3)
		}
		return s
	}
	s := fmt.Sprintf("p50 %.0f µs, p99 %.0f µs", v[MetricP50.Name], v[MetricP99.Name])
	if p, ok := v[MetricP999.Name]; ok {
		s += fmt.Sprintf(", p99.9 %.0f µs", p)
	}
	return s
}

func mdTable(b *strings.Builder, head []string, rows [][]string) {
	fmt.Fprintf(b, "| %s |\n|", strings.Join(head, " | "))
	for range head {
		b.WriteString("---|")
	}
	b.WriteString("\n")
	for _, r := range rows {
		esc := make([]string, len(r))
		for i, c := range r {
			esc[i] = strings.ReplaceAll(c, "|", `\|`)
		}
		fmt.Fprintf(b, "| %s |\n", strings.Join(esc, " | "))
	}
}
