package perf

import (
	"math"
	"testing"
)

func TestSummarize(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   []float64
		want Stat
	}{
		{"odd count takes the middle value", []float64{3, 1, 2}, Stat{N: 3, Median: 2, Min: 1, Max: 3}},
		{"even count takes the mean of the middle two", []float64{4, 1, 3, 2}, Stat{N: 4, Median: 2.5, Min: 1, Max: 4}},
		{"one value", []float64{7}, Stat{N: 1, Median: 7, Min: 7, Max: 7}},
		{"NaN is ignored", []float64{5, math.NaN(), 1}, Stat{N: 2, Median: 3, Min: 1, Max: 5}},
		{"nothing gives the zero Stat", nil, Stat{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := append([]float64(nil), tc.in...)
			if got := Summarize(in); got != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
			for i := range in {
				if in[i] != tc.in[i] && !math.IsNaN(tc.in[i]) {
					t.Fatal("Summarize reordered its input")
				}
			}
		})
	}
}

func TestScheduleInterleavesRoundsAndRotatesTheFirstSystem(t *testing.T) {
	got := Schedule(3, 3)
	want := []Slot{
		{0, 1}, {1, 1}, {2, 1},
		{1, 2}, {2, 2}, {0, 2},
		{2, 3}, {0, 3}, {1, 3},
	}
	if len(got) != len(want) {
		t.Fatalf("%d slots, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("slot %d = %+v, want %+v", i, got[i], want[i])
		}
	}
}

func TestScheduleMeasuresEverySystemOncePerRound(t *testing.T) {
	for systems := 1; systems <= 5; systems++ {
		for reps := 1; reps <= 4; reps++ {
			s := Schedule(systems, reps)
			if len(s) != systems*reps {
				t.Fatalf("Schedule(%d, %d): %d slots", systems, reps, len(s))
			}
			for r := range reps {
				seen := map[int]bool{}
				for _, slot := range s[r*systems : (r+1)*systems] {
					if slot.Rep != r+1 {
						t.Fatalf("Schedule(%d, %d): round %d holds rep %d", systems, reps, r+1, slot.Rep)
					}
					if seen[slot.System] || slot.System < 0 || slot.System >= systems {
						t.Fatalf("Schedule(%d, %d): round %d has system %d twice or out of range", systems, reps, r+1, slot.System)
					}
					seen[slot.System] = true
				}
			}
		}
	}
}

func TestPercentileTakesTheNearestRank(t *testing.T) {
	hundred := make([]float64, 100)
	for i := range hundred {
		hundred[i] = float64(i + 1)
	}
	thousand := make([]float64, 1000)
	for i := range thousand {
		thousand[i] = float64(i + 1)
	}
	for _, tc := range []struct {
		name string
		in   []float64
		p    float64
		want float64
	}{
		{"median of 1..100", hundred, 50, 50},
		{"p99 of 1..100", hundred, 99, 99},
		{"p99.9 of 1..100 is the maximum", hundred, 99.9, 100},
		{"p99.9 of 1..1000", thousand, 99.9, 999},
		{"p100 is the maximum", thousand, 100, 1000},
		{"a tiny p is the minimum", thousand, 0.01, 1},
		{"one value", []float64{7}, 99.9, 7},
		{"no values", nil, 50, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Percentile(tc.in, tc.p); got != tc.want {
				t.Errorf("Percentile(p=%v) = %v, want %v", tc.p, got, tc.want)
			}
		})
	}
}
