package udpsearch

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/snorkel-net/snorkel/perf/internal/fixture"
)

// fakeTunnel stands in for a system in search tests: for 100 seconds, so
// that a datagram more or less does not decide a trial, a trial offers
// its rate (or, unpaced, probeSent datagrams a second), and the tunnel
// delivers at most capacity a second, losing a further share of what it
// delivers given by lossAt.
type fakeTunnel struct {
	capacity  float64
	probeSent int64
	// probeRx is what arrives of an unpaced probe: an unpaced source
	// takes CPU from the tunnel, so less than capacity.
	probeRx int64
	lossAt  func(rate float64) float64 // percent
	// sourceMax, if set, is the most a paced source offers: the tunnel
	// leaves it no more CPU.
	sourceMax float64
	rates     []float64
}

func (f *fakeTunnel) trial(_ context.Context, rate float64) (Trial, error) {
	f.rates = append(f.rates, rate)
	const secs = 100
	if rate == 0 {
		return Trial{Sent: f.probeSent * secs, Received: f.probeRx * secs, Seconds: secs}, nil
	}
	offered := rate
	if f.sourceMax > 0 {
		offered = min(rate, f.sourceMax)
	}
	sent := int64(math.Round(offered * secs))
	rx := min(float64(sent), f.capacity*secs)
	if f.lossAt != nil {
		rx *= 1 - f.lossAt(rate)/100
	}
	return Trial{Rate: rate, Sent: sent, Received: int64(math.Floor(rx)), Seconds: secs}, nil
}

func TestUDPSearchConvergesOnTheCapacityFromBelow(t *testing.T) {
	for _, tc := range []struct {
		name               string
		capacity           float64
		probeSent, probeRx int64
		// within is how far below the capacity the rate may be: the
		// trials take it to within 5% from a guess near the capacity,
		// but only within a halving from a guess far off.
		within float64
	}{
		{"probe's received rate passes", 37000, 300000, 30000, 0.05},
		{"probe's received rate fails", 21000, 300000, 30000, 0.05},
		{"capacity near the source's", 280000, 300000, 250000, 0.05},
		{"nothing arrives of the probe", 5000, 300000, 0, 0.5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeTunnel{capacity: tc.capacity, probeSent: tc.probeSent, probeRx: tc.probeRx}
			r, err := searchRate(t.Context(), Options{}, f.trial)
			if err != nil {
				t.Fatal(err)
			}
			if !r.Found || r.Rate > tc.capacity || r.Rate < (1-tc.within)*tc.capacity {
				t.Errorf("found %v, rate %.0f; want within %.0f%% below %.0f (rates tried %.0f)", r.Found, r.Rate, 100*tc.within, tc.capacity, f.rates)
			}
			if f.rates[0] != 0 || r.BoundFrom != BoundProbe || r.Bound != float64(tc.probeSent) || len(r.Trials) > MaxTrials {
				t.Errorf("rates tried %.0f, bound %v from %q; want an unpaced probe first, bounding the search", f.rates, r.Bound, r.BoundFrom)
			}
			for _, rate := range f.rates {
				if rate > float64(tc.probeSent) {
					t.Errorf("tried %.0f/s, above the probe's %d/s", rate, tc.probeSent)
				}
			}
			if err := r.check(); err != nil {
				t.Errorf("report does not hold together: %v", err)
			}
		})
	}
}

func TestUDPSearchPassesTrialsWithinTheLossThresholdOnly(t *testing.T) {
	// Loss grows with the rate and never reaches zero: 0.1% exactly at
	// 40000/s.
	f := &fakeTunnel{capacity: 1e9, probeSent: 200000, probeRx: 30000,
		lossAt: func(rate float64) float64 { return 0.1 * rate / 40000 }}
	r, err := searchRate(t.Context(), Options{}, f.trial)
	if err != nil {
		t.Fatal(err)
	}
	if !r.Found || r.Loss > MaxLoss || r.Rate > 40000 || r.Rate < 38000 {
		t.Errorf("found %v, %.0f/s at %.3f%% lost; want just under 40000/s with at most %g%% (rates tried %.0f)", r.Found, r.Rate, r.Loss, MaxLoss, f.rates)
	}
	for _, tr := range r.Trials {
		if tr.Rate > r.Rate && tr.Loss() <= MaxLoss {
			t.Errorf("a trial at %.0f/s passed with %.3f%% lost, above the rate reported", tr.Rate, tr.Loss())
		}
	}

	// A stricter threshold finds a lower rate.
	f.rates = nil
	strict, err := searchRate(t.Context(), Options{MaxLoss: 0.01}, f.trial)
	if err != nil {
		t.Fatal(err)
	}
	if !strict.Found || strict.Loss > 0.01 || strict.Rate > 4000 || strict.Rate < 2000 {
		t.Errorf("at 0.01%%: %.0f/s at %.4f%% lost; want 2000 to 4000/s (rates tried %.0f)", strict.Rate, strict.Loss, f.rates)
	}
}

func TestUDPSearchStaysWithinItsTrials(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 500 {
		probe := int64(1000 + rng.IntN(1000000))
		f := &fakeTunnel{capacity: float64(rng.IntN(int(probe) * 2)), probeSent: probe, probeRx: int64(rng.IntN(int(probe)))}
		if rng.IntN(4) == 0 {
			f.sourceMax = float64(1 + rng.IntN(int(probe)))
		}
		if rng.IntN(4) == 0 {
			// A noisy tunnel, whose loss is not monotonic in the rate.
			f.lossAt = func(float64) float64 { return rng.Float64() * 0.2 }
		}
		o := Options{MaxTrials: 1 + rng.IntN(10)}
		if rng.IntN(3) == 0 {
			o.Bound = float64(1 + rng.IntN(1000000))
		}
		r, err := searchRate(t.Context(), o, f.trial)
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Trials) > o.MaxTrials || len(r.Trials) != len(f.rates) || len(r.Trials) == 0 {
			t.Fatalf("case %d (%+v, %+v): %d trials reported, %d run; at most %d allowed", i, f, o, len(r.Trials), len(f.rates), o.MaxTrials)
		}
		best := 0.0
		for _, tr := range r.Trials {
			if tr.Sent > 0 && tr.Loss() <= MaxLoss {
				best = max(best, tr.Offered())
			}
		}
		if r.Rate != best || r.Found != (best > 0) {
			t.Fatalf("case %d: reported %.0f/s (found %v), but the best passing trial offered %.0f/s", i, r.Rate, r.Found, best)
		}
		if err := r.check(); err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
	}
}

func TestUDPSearchOfATunnelThatLosesAtEveryRateFindsNothing(t *testing.T) {
	f := &fakeTunnel{capacity: 1e9, probeSent: 100000, probeRx: 50000, lossAt: func(float64) float64 { return 1 }}
	r, err := searchRate(t.Context(), Options{}, f.trial)
	if err != nil {
		t.Fatal(err)
	}
	if r.Found || r.Rate != 0 || len(r.Trials) != MaxTrials {
		t.Errorf("found %v at %.0f/s after %d trials; want nothing after all %d", r.Found, r.Rate, len(r.Trials), MaxTrials)
	}
	if err := r.check(); err != nil {
		t.Error(err)
	}
}

func TestUDPSearchFromABoundSkipsTheProbe(t *testing.T) {
	f := &fakeTunnel{capacity: 50000}
	r, err := searchRate(t.Context(), Options{Bound: 20000}, f.trial)
	if err != nil {
		t.Fatal(err)
	}
	if !r.Found || r.Rate != 20000 || len(f.rates) != 1 || r.BoundFrom != BoundFlag || !r.AtBound {
		t.Errorf("bound below the capacity: %.0f/s after rates %.0f; want the bound, in one trial", r.Rate, f.rates)
	}
	if r.Trials[0].Rate == 0 {
		t.Error("an unpaced probe, with a bound given")
	}

	f = &fakeTunnel{capacity: 50000}
	r, err = searchRate(t.Context(), Options{Bound: 400000}, f.trial)
	if err != nil {
		t.Fatal(err)
	}
	if f.rates[0] != 400000 || !r.Found || r.Rate > 50000 || r.Rate < 45000 || r.AtBound {
		t.Errorf("bound above the capacity: %.0f/s after rates %.0f; want the bound tried first, then near 50000", r.Rate, f.rates)
	}
}

func TestUDPSearchOfATunnelThatKeepsUpWithTheSourceEndsAfterTheProbe(t *testing.T) {
	f := &fakeTunnel{capacity: 1e9, probeSent: 30000, probeRx: 30000}
	r, err := searchRate(t.Context(), Options{}, f.trial)
	if err != nil {
		t.Fatal(err)
	}
	if !r.Found || !r.AtBound || r.Rate != 30000 || len(r.Trials) != 1 {
		t.Errorf("%+v: want the probe's rate, at the bound, after the probe alone", r)
	}
	if err := r.check(); err != nil {
		t.Error(err)
	}
}

func TestUDPSearchCountsARateTheSourceFellShortOfAsNotPassed(t *testing.T) {
	// The tunnel loses nothing, but leaves the source CPU for 20000/s
	// only: 50000/s and 25000/s were never offered, and the highest rate
	// that really was is the result.
	f := &fakeTunnel{capacity: 1e9, sourceMax: 20000}
	r, err := searchRate(t.Context(), Options{Bound: 50000}, f.trial)
	if err != nil {
		t.Fatal(err)
	}
	if !r.Found || r.AtBound || r.Rate != 20000 {
		t.Errorf("%.0f/s (at bound %v) after rates %.0f; want 20000/s, not at the bound", r.Rate, r.AtBound, f.rates)
	}
	if len(f.rates) < 3 || f.rates[1] >= f.rates[0] || f.rates[2] >= f.rates[1] {
		t.Errorf("rates tried %.0f: want each short trial to count as failed, and the search to go down", f.rates)
	}
	if err := r.check(); err != nil {
		t.Error(err)
	}
}

func TestUDPSearchStopsAtATrialsError(t *testing.T) {
	n := 0
	boom := errors.New("sink gone")
	r, err := searchRate(t.Context(), Options{}, func(ctx context.Context, rate float64) (Trial, error) {
		if n++; n == 3 {
			return Trial{}, boom
		}
		return Trial{Rate: rate, Sent: 1000, Received: 500, Seconds: 1}, nil
	})
	if !errors.Is(err, boom) || len(r.Trials) != 2 {
		t.Errorf("err %v with %d trials; want the trial's error after 2", err, len(r.Trials))
	}
}

func TestTrialTimeIsAnEighthOfTheDurationWithinBounds(t *testing.T) {
	for d, want := range map[time.Duration]time.Duration{
		time.Second:      TrialMin,
		2 * time.Second:  TrialMin,
		10 * time.Second: 1250 * time.Millisecond,
		60 * time.Second: TrialMax,
	} {
		if got := TrialTime(d); got != want {
			t.Errorf("duration %s: trials of %s, want %s", d, got, want)
		}
	}
}

func TestParseReadsARealSearch(t *testing.T) {
	r, err := Parse(fixture.Read(t, "udp-search.json"))
	if err != nil {
		t.Fatal(err)
	}
	if r.Payload != Payload || len(r.Trials) < 2 || r.Trials[0].Rate != 0 || r.BoundFrom != BoundProbe {
		t.Errorf("report %+v: want a probed search of %d-byte datagrams", r, Payload)
	}
	if !r.Found || r.Rate <= 0 || r.Loss > MaxLoss || r.Trials[0].ReceivedRate() <= 0 {
		t.Errorf("report %+v: want a rate found within %g%% lost after a probe that got through", r, MaxLoss)
	}
}

func TestParseRefusesWhatDoesNotHoldTogether(t *testing.T) {
	good := Report{Payload: 64, TrialSeconds: 1, MaxLoss: 0.1, MaxTrials: 8, Bound: 1000, BoundFrom: BoundFlag,
		Trials: []Trial{{Rate: 1000, Sent: 1000, Received: 1000, Seconds: 1}}, Found: true, Rate: 1000, Loss: 0}
	enc := func(r Report) []byte { b, _ := json.Marshal(r); return b }
	if _, err := Parse(enc(good)); err != nil {
		t.Fatalf("good report refused: %v", err)
	}
	for name, change := range map[string]func(r *Report){
		"no trials":                       func(r *Report) { r.Trials = nil },
		"more received than sent":         func(r *Report) { r.Trials[0].Received = 1001 },
		"a trial of no time":              func(r *Report) { r.Trials[0].Seconds = 0 },
		"counts that overflow":            func(r *Report) { r.Trials[0].SendErrors = math.MaxInt64 },
		"a rate no trial offered":         func(r *Report) { r.Rate = 2000 },
		"found, but every trial lost":     func(r *Report) { r.Trials[0].Received = 900 },
		"not found, but a trial passed":   func(r *Report) { r.Found, r.Rate = false, 0 },
		"at the bound, but found nothing": func(r *Report) { r.AtBound, r.Found, r.Trials[0].Received = true, false, 0 },
		"more trials than allowed":        func(r *Report) { r.MaxTrials = 1; r.Trials = append(r.Trials, r.Trials[0]) },
	} {
		r := good
		r.Trials = append([]Trial(nil), good.Trials...)
		change(&r)
		if got, err := Parse(enc(r)); err == nil {
			t.Errorf("%s: parsed %+v, want an error", name, got)
		}
	}
	if _, err := Parse([]byte(`{"trials": [`)); err == nil || !strings.Contains(err.Error(), "udpsearch: report") {
		t.Errorf("cut JSON: %v", err)
	}
}

func TestPacerNeverRunsAheadAndMakesUpForLateWakeUps(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, rate := range []float64{100, 20000, 250000, 2e6} {
		p := newPacer(rate)
		var now, sent int64
		const end = int64(time.Second)
		for now < end {
			n, wake := p.next(now, sent)
			if n == 0 {
				if wake <= now {
					t.Fatalf("rate %.0f: at %d ns, nothing due and a wake-up at %d ns: it would spin", rate, now, wake)
				}
				// Wake-ups come late by up to 300 µs.
				now = wake + rng.Int64N(300000)
				continue
			}
			sent += int64(n)
			if due := int64(float64(now)*rate/1e9) + 1; sent > due {
				t.Fatalf("rate %.0f: %d sent by %d ns, only %d due", rate, sent, now, due)
			}
			now += 2000 // a send takes 2 µs
		}
		// Short of the second's worth by at most a batch and one late
		// wake-up at the end.
		if want := rate * float64(end) / 1e9; float64(sent) < want-float64(p.batch)-rate*300e-6 {
			t.Errorf("rate %.0f: %d sent in a second, want about %.0f", rate, sent, want)
		}
	}
	if n, _ := newPacer(0).next(123, 456); n != udpBatch {
		t.Errorf("unpaced: %d at a time, want full batches of %d", n, udpBatch)
	}
}

// FuzzParse: any input is refused or yields a report whose
// figure is its best trial's and whose values are finite and in range.
func FuzzParse(f *testing.F) {
	f.Add(fixture.Read(f, "udp-search.json"))
	f.Add([]byte(`{"maxLossPercent":0.1,"trials":[{"rate":1000,"sent":1000,"received":1000,"seconds":1}],"found":true,"rate":1000}`))
	f.Add([]byte(`{"trials":[{"sent":10,"received":0,"seconds":1}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := Parse(b)
		if err != nil {
			return
		}
		best, ok := bestTrial(r.Trials, r.MaxLoss)
		if ok != r.Found || ok && best.Offered() != r.Rate {
			t.Fatalf("accepted %s: found %v at %v/s, best trial %+v (%v)", b, r.Found, r.Rate, best, ok)
		}
		if r.Found && (r.Loss < 0 || r.Loss > r.MaxLoss) {
			t.Fatalf("accepted %s: loss %v outside [0, %v]", b, r.Loss, r.MaxLoss)
		}
		if len(r.Trials) < 1 {
			t.Fatalf("accepted %s with no trials", b)
		}
	})
}
