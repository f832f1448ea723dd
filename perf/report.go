package perf

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"
)

// summaryTable returns the header and rows of the per-system table: the
// throughput statistics and the medians of the cost metrics.
func (r *Results) summaryTable() ([]string, [][]string) {
	head := []string{"system", "median Gb/s", "min Gb/s", "max Gb/s", "retransmits", "tunnel CPU", "host busy", "reps"}
	var rows [][]string
	for _, s := range r.Systems {
		tp, ok := r.Summary(s.Name, MetricThroughput.Name)
		row := []string{s.Name, "-", "-", "-", "-", "-", "-", "0"}
		if ok {
			row[7] = fmt.Sprint(tp.N)
			if tp.Failed > 0 {
				row[7] = fmt.Sprintf("%d (%d failed)", tp.N, tp.Failed)
			}
			if tp.N > 0 {
				row[1], row[2], row[3] = gbps(tp.Median), gbps(tp.Min), gbps(tp.Max)
			}
		}
		if m, ok := r.Summary(s.Name, MetricRetransmits.Name); ok && m.N > 0 {
			row[4] = fmt.Sprintf("%.0f", m.Median)
		}
		if m, ok := r.Summary(s.Name, MetricTunnelCPU.Name); ok && m.N > 0 {
			row[5] = fmt.Sprintf("%.0f%%", m.Median)
		}
		if m, ok := r.Summary(s.Name, MetricHostBusy.Name); ok && m.N > 0 {
			row[6] = fmt.Sprintf("%.0f%%", m.Median)
		}
		rows = append(rows, row)
	}
	return head, rows
}

func gbps(bps float64) string { return fmt.Sprintf("%.2f", bps/1e9) }

// String says the comparison in words.
func (c Comparison) String() string {
	s := fmt.Sprintf("%s / %s (median %s): %.2f×", c.System, c.Baseline, c.Metric, c.Ratio)
	if c.Target > 0 {
		verdict := "met"
		if !c.Met() {
			verdict = "NOT met"
		}
		s += fmt.Sprintf(" (target ≥ %.2f×: %s)", c.Target, verdict)
	}
	return s
}

// WriteTable writes the summary for a terminal: the table, the
// comparisons, and what the columns mean.
func (r *Results) WriteTable(w io.Writer) error {
	head, rows := r.summaryTable()
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, strings.Join(head, "\t")+"\t")
	for _, row := range rows {
		fmt.Fprintln(tw, strings.Join(row, "\t")+"\t")
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	for _, c := range r.Comparisons {
		fmt.Fprintln(w, c)
	}
	_, err := fmt.Fprintf(w, "\nretransmits, tunnel CPU (%% of one core, both gateway nodes) and host busy (%% of %d cores) are medians over the reps\n", r.Machine.CPUs)
	return err
}

// WriteMarkdown writes dir/report.md: the summary, the comparisons, every
// measurement, the command and the machine.
func (r *Results) WriteMarkdown(dir string) error {
	var b strings.Builder
	fmt.Fprintf(&b, "# Snorkel benchmark: %s\n\n", r.Benchmark)
	fmt.Fprintf(&b, "Run %s to %s", r.Started.Format(time.RFC3339), r.Finished.Format(time.RFC3339))
	if r.Interrupted {
		b.WriteString(" — **interrupted**, partial results")
	}
	b.WriteString(".\n\n")
	fmt.Fprintf(&b, "```\n%s\n```\n\n", r.Command)
	fmt.Fprintf(&b, "Machine: %d CPUs (%s), kernel %s, host %s; %s; %s.\n\n", r.Machine.CPUs, r.Machine.CPUModel, r.Machine.Kernel, r.Machine.Hostname, r.Machine.GoVersion, r.Machine.Iperf3)
	fmt.Fprintf(&b, "Workload: %s. Repetitions per system: %d, of %.0f s each, interleaved across systems; before each one the host is given up to %.0f s to fall to %.0f%% busy. Tunnel MTU %d.\n\n",
		r.Settings.Workload, r.Settings.Reps, r.Settings.DurationSec, r.Settings.IdleWaitSec, r.Settings.IdleBusyMax, r.Settings.TunnelMTU)

	b.WriteString("## Summary\n\n")
	head, rows := r.summaryTable()
	mdTable(&b, head, rows)
	fmt.Fprintf(&b, "\nRetransmits, tunnel CPU (%% of one core, both gateway nodes together) and host busy (%% of all %d cores) are medians.\n", r.Machine.CPUs)
	if len(r.Comparisons) > 0 {
		b.WriteString("\n")
		for _, c := range r.Comparisons {
			fmt.Fprintf(&b, "- %s\n", c)
		}
	}

	b.WriteString("\n## Systems\n\n")
	for _, s := range r.Systems {
		fmt.Fprintf(&b, "- **%s** (%s): %s. Namespaces %s*, client %s, server %s.", s.Name, s.Kind, s.Description, s.Prefix, s.Client, s.Server)
		if s.Version != "" {
			fmt.Fprintf(&b, " Version: `%s`.", s.Version)
		}
		b.WriteString("\n")
	}

	b.WriteString("\n## Measurements\n\n")
	var mrows [][]string
	for _, m := range r.Runs {
		row := []string{fmt.Sprint(m.Order), m.System, fmt.Sprint(m.Rep), m.Start.Format("15:04:05")}
		if m.Error != "" {
			row = append(row, "failed: "+m.Error, "", "", "", "")
		} else {
			var per []string
			for _, p := range m.Processes {
				per = append(per, fmt.Sprintf("%s %.0f%%", p.Name, p.Percent))
			}
			row = append(row, gbps(m.Values[MetricThroughput.Name]), fmt.Sprintf("%.0f", m.Values[MetricRetransmits.Name]),
				strings.Join(per, ", "), fmt.Sprintf("%.0f%%", m.Values[MetricHostBusy.Name]), fmt.Sprintf("%.0f%%", m.IdleBefore))
		}
		mrows = append(mrows, row)
	}
	mdTable(&b, []string{"#", "system", "rep", "start (UTC)", "Gb/s", "retransmits", "tunnel CPU", "host busy", "busy before"}, mrows)
	b.WriteString("\nEvery value, with iperf3's own output per rep, is in results.json and raw/.\n")

	path := filepath.Join(dir, "report.md")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		return fmt.Errorf("perf: write report: %w", err)
	}
	return nil
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
