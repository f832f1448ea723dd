package perf

import (
	"math"
	"slices"
)

// Stat summarises the repetitions of one metric.
type Stat struct {
	N      int     `json:"n"`
	Median float64 `json:"median"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
}

// Summarize returns the median, minimum and maximum of vs. The median of an
// even count is the mean of the two middle values. NaN values are ignored;
// with none left the result is the zero Stat, N 0.
func Summarize(vs []float64) Stat {
	s := make([]float64, 0, len(vs))
	for _, v := range vs {
		if !math.IsNaN(v) {
			s = append(s, v)
		}
	}
	if len(s) == 0 {
		return Stat{}
	}
	slices.Sort(s)
	n := len(s)
	med := s[n/2]
	if n%2 == 0 {
		med = (s[n/2-1] + s[n/2]) / 2
	}
	return Stat{N: n, Median: med, Min: s[0], Max: s[n-1]}
}

// Slot is one measurement of a schedule: repetition Rep (from 1) of the
// system at index System.
type Slot struct {
	System int
	Rep    int
}

// Schedule returns the order in which reps repetitions of systems systems
// are measured: round r measures every system once, and each round starts
// one system further on, so that no system always runs first after the idle
// wait or always follows the same neighbour.
func Schedule(systems, reps int) []Slot {
	out := make([]Slot, 0, systems*reps)
	for r := range reps {
		for i := range systems {
			out = append(out, Slot{System: (r + i) % systems, Rep: r + 1})
		}
	}
	return out
}

// Percentile returns the p-th percentile (0 < p ≤ 100) of sorted, an
// ascending slice, by the nearest-rank method: the smallest value at or
// below which p percent of the values lie. It returns 0 for no values.
func Percentile(sorted []float64, p float64) float64 {
	n := len(sorted)
	if n == 0 {
		return 0
	}
	// The tolerance keeps float error (99.9/100*1000 = 999.0000000000001)
	// from moving a rank up.
	rank := int(math.Ceil(p/100*float64(n) - 1e-9))
	return sorted[min(max(rank, 1), n)-1]
}
