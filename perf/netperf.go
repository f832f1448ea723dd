package perf

import (
	"bufio"
	"bytes"
	"fmt"
	"strconv"
	"strings"
)

// NetperfRRSelectors are the omni output selectors a Kubernetes latency
// client asks netperf's TCP_RR test for (netperf -t TCP_RR -- -o ...), in
// the order ParseNetperfRR reads them.
const NetperfRRSelectors = "min_latency,mean_latency,P50_LATENCY,P90_LATENCY,P99_LATENCY,max_latency,transaction_rate"

// NetperfRR is what netperf's TCP_RR test reports with NetperfRRSelectors.
type NetperfRR struct {
	MinMicros, MeanMicros, P50Micros, P90Micros, P99Micros, MaxMicros float64
	Transactions                                                      float64 // per second
}

// ParseNetperfRR reads netperf's output for NetperfRRSelectors: a test
// banner, a line of column names, and a line of comma-separated values in
// the selectors' order. It takes the last line of seven numbers, so that a
// retry's output before it does not matter.
func ParseNetperfRR(out []byte) (NetperfRR, error) {
	var vals []float64
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Split(strings.TrimSpace(sc.Text()), ",")
		if len(f) != 7 {
			continue
		}
		v := make([]float64, len(f))
		ok := true
		for i, s := range f {
			x, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
			if err != nil {
				ok = false
				break
			}
			v[i] = x
		}
		if ok {
			vals = v
		}
	}
	if vals == nil {
		return NetperfRR{}, fmt.Errorf("perf: netperf printed no line of 7 values for %s; its output:\n%s", NetperfRRSelectors, bytes.TrimSpace(out))
	}
	r := NetperfRR{MinMicros: vals[0], MeanMicros: vals[1], P50Micros: vals[2], P90Micros: vals[3], P99Micros: vals[4], MaxMicros: vals[5], Transactions: vals[6]}
	if r.Transactions <= 0 || !(r.MinMicros <= r.P50Micros && r.P50Micros <= r.P90Micros && r.P90Micros <= r.P99Micros && r.P99Micros <= r.MaxMicros) {
		return NetperfRR{}, fmt.Errorf("perf: netperf TCP_RR values out of order or empty: %+v", r)
	}
	return r, nil
}

// Values returns the metrics of a netperf TCP_RR run.
func (r NetperfRR) Values() map[string]float64 {
	return map[string]float64{
		MetricTransactions.Name: r.Transactions,
		MetricP50.Name:          r.P50Micros,
		MetricP99.Name:          r.P99Micros,
		MetricRTTMean.Name:      r.MeanMicros,
	}
}
