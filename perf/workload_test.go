package perf

import (
	"maps"
	"testing"

	"github.com/snorkel-net/snorkel/perf/udpsearch"
)

func TestUDPValuesAreTheSearchsFigures(t *testing.T) {
	probe := udpsearch.Trial{Sent: 40000, Received: 20000, Seconds: 1}
	for name, tc := range map[string]struct {
		r    udpsearch.Report
		want map[string]float64
	}{
		"found after a probe": {
			udpsearch.Report{BoundFrom: udpsearch.BoundProbe, Found: true, Rate: 20000, Loss: 0.05,
				Trials: []udpsearch.Trial{probe, {Rate: 20000, Sent: 20000, Received: 19990, Seconds: 1}}},
			map[string]float64{MetricUDPRate.Name: 20000, MetricUDPTrials.Name: 2, MetricLoss.Name: 0.05, MetricUDPProbeRx.Name: 20000},
		},
		"at the bound given": {
			udpsearch.Report{BoundFrom: udpsearch.BoundFlag, Bound: 1000, Found: true, AtBound: true, Rate: 1000,
				Trials: []udpsearch.Trial{{Rate: 1000, Sent: 1000, Received: 1000, Seconds: 1}}},
			map[string]float64{MetricUDPRate.Name: 1000, MetricUDPTrials.Name: 1, MetricLoss.Name: 0, MetricUDPAtBound.Name: 1},
		},
		"nothing found": {
			udpsearch.Report{BoundFrom: udpsearch.BoundProbe, Trials: []udpsearch.Trial{probe}},
			map[string]float64{MetricUDPRate.Name: 0, MetricUDPTrials.Name: 1, MetricUDPProbeRx.Name: 20000},
		},
	} {
		if got := udpValues(tc.r); !maps.Equal(got, tc.want) {
			t.Errorf("%s: %v, want %v", name, got, tc.want)
		}
	}
}
