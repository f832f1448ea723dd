package perf

import (
	"fmt"
	"html"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/snorkel-net/snorkel/perf/udpsearch"
)

// Plots are SVG grouped bar charts: a group per system, a bar per series
// (workload or percentile) at the median, with a whisker from the minimum
// to the maximum over the repetitions.

// plotColors are distinguishable on white and in grey print.
var plotColors = []string{"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"}

// bar is one bar of a chart; ok is false where there is no value.
type bar struct {
	median, min, max float64
	ok               bool
	// label, if set, replaces the median's formatted value above the bar.
	label string
}

// text is what the chart writes above a bar and in its tooltip.
func (b bar) text(format string) string {
	if b.label != "" {
		return b.label
	}
	return fmt.Sprintf(format, b.median)
}

type barSeries struct {
	name string
	bars []bar // one per group
}

type barChart struct {
	title, yLabel string
	groups        []string
	series        []barSeries
	// notes replace a group's bars with a text, for values that cannot
	// be measured.
	notes map[int]string
	// format formats a value for its label.
	format string
	// log draws the value axis in decades, for values that span several
	// (latency percentiles).
	log bool
}

// Sizes of a chart, in pixels.
const (
	plotBarWidth = 16
	plotGroupGap = 28
	plotLeft     = 80
	plotRight    = 20
	plotTitle    = 44 // above the legend
	plotLegendH  = 18 // a legend row
	plotHeight   = 300
	plotBottom   = 130
)

// svg renders the chart.
func (c barChart) svg() []byte {
	nSeries := max(1, len(c.series))
	groupW := nSeries*plotBarWidth + plotGroupGap
	width := max(640, plotLeft+plotRight+len(c.groups)*groupW)
	// The legend wraps at the chart's width; the plot starts below it.
	type entry struct{ x, y int }
	legend := make([]entry, len(c.series))
	lx, ly := plotLeft, plotTitle-8
	for i, s := range c.series {
		w := 16 + 7*len([]rune(s.name)) + 18
		if lx > plotLeft && lx+w > width-plotRight {
			lx, ly = plotLeft, ly+plotLegendH
		}
		legend[i] = entry{lx, ly}
		lx += w
	}
	plotTop := ly + plotLegendH + 16
	height := plotTop + plotHeight + plotBottom
	top := 0.0
	for _, s := range c.series {
		for _, b := range s.bars {
			if b.ok {
				top = max(top, b.max, b.median)
			}
		}
	}
	var ticks []float64
	var y func(v float64) float64
	if c.log {
		lo, hi := logRange(c.series)
		for v := lo; v <= hi*1.0001; v *= 10 {
			ticks = append(ticks, v)
		}
		y = func(v float64) float64 {
			v = max(v, lo)
			return float64(plotTop+plotHeight) - math.Log10(v/lo)/math.Log10(hi/lo)*plotHeight
		}
	} else {
		top, step := niceScale(top)
		for i := 0.0; i*step <= top*1.0001; i++ {
			ticks = append(ticks, i*step)
		}
		y = func(v float64) float64 { return float64(plotTop+plotHeight) - v/top*plotHeight }
	}
	base := y(0)
	if c.log {
		base = float64(plotTop + plotHeight)
	}

	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", width, height, width, height)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", width, height)
	fmt.Fprintf(&b, `<text x="%d" y="22" font-size="16" font-weight="bold">%s</text>`+"\n", plotLeft, esc(c.title))
	for i, s := range c.series {
		e := legend[i]
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="12" height="12" fill="%s"/><text x="%d" y="%d">%s</text>`+"\n", e.x, e.y, plotColors[i%len(plotColors)], e.x+16, e.y+10, esc(s.name))
	}
	// Axis, grid and ticks.
	for _, v := range ticks {
		fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#ddd"/>`+"\n", plotLeft, width-plotRight, y(v), y(v))
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n", plotLeft-6, y(v)+4, esc(tick(v)))
	}
	fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%d" y2="%d" stroke="black"/>`+"\n", plotLeft, plotLeft, plotTop, plotTop+plotHeight)
	fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%d" y2="%d" stroke="black"/>`+"\n", plotLeft, width-plotRight, plotTop+plotHeight, plotTop+plotHeight)
	fmt.Fprintf(&b, `<text transform="translate(%d %d) rotate(-90)" text-anchor="middle">%s</text>`+"\n", 16, plotTop+plotHeight/2, esc(c.yLabel))
	// Groups.
	for g, name := range c.groups {
		gx := plotLeft + plotGroupGap/2 + g*groupW
		if note, ok := c.notes[g]; ok {
			fmt.Fprintf(&b, `<text transform="translate(%d %d) rotate(-90)" font-size="10" fill="#555">%s</text>`+"\n", gx+groupW/2-plotGroupGap/2+4, plotTop+plotHeight-6, esc(note))
		} else {
			for i, s := range c.series {
				br := s.bars[g]
				if !br.ok {
					continue
				}
				bx := gx + i*plotBarWidth
				color := plotColors[i%len(plotColors)]
				fmt.Fprintf(&b, `<rect class="bar" x="%d" y="%.1f" width="%d" height="%.1f" fill="%s"><title>%s, %s: %s</title></rect>`+"\n",
					bx, y(br.median), plotBarWidth-2, base-y(br.median), color, esc(name), esc(s.name), esc(br.text(c.format)))
				if br.max > br.min {
					cx := float64(bx) + float64(plotBarWidth-2)/2
					fmt.Fprintf(&b, `<path class="whisker" d="M%.1f %.1fV%.1fM%.1f %.1fh6M%.1f %.1fh6" stroke="black" fill="none"/>`+"\n",
						cx, y(br.min), y(br.max), cx-3, y(br.min), cx-3, y(br.max))
				}
				fmt.Fprintf(&b, `<text transform="translate(%.1f %.1f) rotate(-90)" font-size="9">%s</text>`+"\n",
					float64(bx)+float64(plotBarWidth)/2+2, y(max(br.max, br.median))-4, esc(br.text(c.format)))
			}
		}
		fmt.Fprintf(&b, `<text transform="translate(%d %d) rotate(-35)" text-anchor="end">%s</text>`+"\n", gx+groupW/2-plotGroupGap/2, plotTop+plotHeight+16, esc(name))
	}
	fmt.Fprintf(&b, `<text x="%d" y="%d" font-size="10" fill="#555">bars: median over the repetitions; whiskers: minimum to maximum</text>`+"\n", plotLeft, height-8)
	b.WriteString("</svg>\n")
	return []byte(b.String())
}

// logRange returns the decades below the smallest and above the largest
// value of the series.
func logRange(series []barSeries) (lo, hi float64) {
	lo, hi = math.Inf(1), 0
	for _, s := range series {
		for _, b := range s.bars {
			if b.ok {
				if b.min > 0 {
					lo = min(lo, b.min)
				}
				if b.median > 0 {
					lo = min(lo, b.median)
				}
				hi = max(hi, b.max, b.median)
			}
		}
	}
	if hi <= 0 || math.IsInf(lo, 1) {
		return 1, 10
	}
	lo = math.Pow(10, math.Floor(math.Log10(lo)))
	hi = math.Pow(10, math.Ceil(math.Log10(hi)))
	if hi <= lo {
		hi = lo * 10
	}
	return lo, hi
}

// niceScale returns an axis top at or above v and its tick step, both
// 1, 2 or 5 times a power of ten.
func niceScale(v float64) (top, step float64) {
	if v <= 0 || math.IsNaN(v) || math.IsInf(v, 0) {
		return 1, 0.2
	}
	raw := v / 5
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if step = m * p; step >= raw {
			break
		}
	}
	return math.Ceil(v/step-1e-9) * step, step
}

// tick formats an axis value as a person writes it: no trailing zeros,
// no decimal point for a whole number ("0", "0.5", "2.5", "10"). Ticks
// are multiples of 1, 2 or 5 times a power of ten, or powers of ten, so
// nine significant digits remove the float error of their products and
// keep every digit they have.
func tick(v float64) string {
	if v == 0 {
		return "0"
	}
	r, _ := strconv.ParseFloat(strconv.FormatFloat(v, 'g', 9, 64), 64)
	return strconv.FormatFloat(r, 'f', -1, 64)
}

func esc(s string) string { return html.EscapeString(s) }

// seriesOf returns a series of a metric's summaries over systems.
func (r *Results) seriesOf(name string, systems []SystemInfo, workload, metric string, scale float64) barSeries {
	s := barSeries{name: name}
	for _, sys := range systems {
		sm, ok := r.Summary(sys.Name, workload, metric)
		if !ok || sm.N == 0 {
			s.bars = append(s.bars, bar{})
			continue
		}
		s.bars = append(s.bars, bar{median: sm.Median * scale, min: sm.Min * scale, max: sm.Max * scale, ok: true})
	}
	return s
}

// charts returns the run's charts by file name: throughput, UDP packet
// rate, latency percentiles and CPU per gigabit, each for the workloads
// that ran.
func (r *Results) charts() map[string]barChart {
	var systems []SystemInfo
	for _, s := range r.Systems {
		if s.Unavailable == "" {
			systems = append(systems, s)
		}
	}
	names := make([]string, len(systems))
	for i, s := range systems {
		names[i] = s.Name
	}
	out := map[string]barChart{}
	tput := barChart{title: "TCP throughput (iperf3)", yLabel: "Gb/s of payload received", groups: names, format: "%.2f"}
	cpu := barChart{title: "Tunnel CPU per gigabit (both gateways)", yLabel: "CPU seconds per Gb", groups: names, format: "%.2f", notes: map[int]string{}}
	for i, s := range systems {
		if s.KernelDataPath {
			cpu.notes[i] = kernelCPU
		}
	}
	for _, w := range r.Workloads {
		if w.Primary != MetricThroughput.Name {
			continue
		}
		tput.series = append(tput.series, r.seriesOf(w.Title, systems, w.Name, MetricThroughput.Name, 1e-9))
		cpu.series = append(cpu.series, r.seriesOf(w.Title, systems, w.Name, MetricCPUPerGbit.Name, 1))
	}
	if len(tput.series) > 0 {
		out["throughput.svg"] = tput
		out["cpu.svg"] = cpu
	}
	if _, ok := r.Workload(WorkloadUDP); ok {
		out["udp.svg"] = r.udpChart(systems, names)
	}
	lat := barChart{title: "Round-trip latency", yLabel: "µs (log scale)", groups: names, format: "%.0f", log: true}
	if _, ok := r.Workload(WorkloadRR); ok {
		lat.series = append(lat.series,
			r.seriesOf("TCP RR p50", systems, WorkloadRR, MetricP50.Name, 1),
			r.seriesOf("TCP RR p99", systems, WorkloadRR, MetricP99.Name, 1),
			r.seriesOf("TCP RR p99.9", systems, WorkloadRR, MetricP999.Name, 1))
	}
	if _, ok := r.Workload(WorkloadPing); ok {
		lat.series = append(lat.series,
			r.seriesOf("ping p50", systems, WorkloadPing, MetricP50.Name, 1),
			r.seriesOf("ping p99", systems, WorkloadPing, MetricP99.Name, 1))
	}
	if len(lat.series) > 0 {
		out["latency.svg"] = lat
	}
	return out
}

// udpChart is the rate each system's UDP search found, each bar labelled
// with the loss at it.
func (r *Results) udpChart(systems []SystemInfo, names []string) barChart {
	maxLoss := r.udpMaxLoss()
	s := r.seriesOf(fmt.Sprintf("highest rate with ≤ %g%% loss; labels: loss at it", maxLoss), systems, WorkloadUDP, MetricUDPRate.Name, 1e-3)
	for i, sys := range systems {
		if !s.bars[i].ok {
			continue
		}
		if l, ok := r.Summary(sys.Name, WorkloadUDP, MetricLoss.Name); ok && l.N > 0 {
			s.bars[i].label = fmt.Sprintf("%s%.1f, %.2f%%", r.udpAtBound(sys.Name), s.bars[i].median, l.Median)
		} else {
			s.bars[i].label = fmt.Sprintf("none with ≤ %g%% lost", maxLoss)
		}
	}
	return barChart{title: fmt.Sprintf("UDP forwarding rate, %d-byte datagrams (RFC 2544 search)", udpsearch.Payload), yLabel: "thousand datagrams per second",
		groups: names, format: "%.1f", series: []barSeries{s}}
}

// plotOrder is the order plots are listed in.
var plotOrder = []string{"throughput.svg", "udp.svg", "latency.svg", "cpu.svg"}

// WritePlots writes the run's SVG charts to dir and returns their names.
func (r *Results) WritePlots(dir string) ([]string, error) {
	charts := r.charts()
	var out []string
	for _, name := range plotOrder {
		c, ok := charts[name]
		if !ok {
			continue
		}
		if err := os.WriteFile(filepath.Join(dir, name), c.svg(), 0o644); err != nil {
			return out, fmt.Errorf("perf: write plot: %w", err)
		}
		out = append(out, name)
	}
	return out, nil
}
