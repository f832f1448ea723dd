package perf

import (
	"testing"

	"github.com/snorkel-net/snorkel/perf/internal/fixture"
)

// The fixture has the shape netperf 2.7 prints for `-t TCP_RR -- -o
// NetperfRRSelectors`: a banner, the column names, the values.
func TestParseNetperfRRReadsTheSelectorsInOrder(t *testing.T) {
	r, err := ParseNetperfRR(fixture.Read(t, "netperf-tcp-rr.txt"))
	if err != nil {
		t.Fatal(err)
	}
	want := NetperfRR{MinMicros: 41, MeanMicros: 58.97, P50Micros: 55, P90Micros: 68, P99Micros: 121, MaxMicros: 2890, Transactions: 16899.713}
	if r != want {
		t.Errorf("got %+v, want %+v", r, want)
	}
	v := r.Values()
	if v[MetricP50.Name] != 55 || v[MetricP99.Name] != 121 || v[MetricTransactions.Name] != 16899.713 {
		t.Errorf("values %v", v)
	}
}

func TestParseNetperfRRRefusesWhatItCannotTrust(t *testing.T) {
	for name, in := range map[string]string{
		"empty":             "",
		"connection failed": "establish control: are you sure there is a netserver listening on 10.9.0.11 at port 12865?\n",
		"header only":       "Minimum Latency Microseconds,Mean Latency Microseconds,a,b,c,d,e\n",
		"out of order":      "41,58.97,55,200,121,2890,16899.713\n",
		"no transactions":   "41,58.97,55,68,121,2890,0\n",
	} {
		if r, err := ParseNetperfRR([]byte(in)); err == nil {
			t.Errorf("%s: parsed %+v, want an error", name, r)
		}
	}
}
