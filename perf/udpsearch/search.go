// Package udpsearch is the UDP forwarding-rate search, after RFC 2544
// section 26.1, and the generator its trials run on (gen.go): a system's
// UDP figure is the highest rate it forwards with at most a tolerated
// loss, found by trials at offered rates the search picks. A source that
// sends as fast as it can measures instead how a machine's CPUs were
// shared among the source, the tunnel and the sink.
//
// Unless given a bound, the search first probes unpaced: the probe's sent
// rate bounds the search (the source offers no more), and its received
// rate is the first guess. From the guess it doubles while trials pass,
// then bisects between the highest rate that passed and the lowest that
// failed, until they are within udpSearchPrecision of each other or the
// trials run out. A trial passes when it lost at most the tolerated share
// and its source offered the rate asked for: a source that fell short
// (left without CPU by the tunnel it measures, on a small machine) did
// not test that rate. The result is the highest rate a source really
// offered in a trial that lost at most the tolerated share; a system that
// loses too much at every rate tried has none.
//
// `snorkel perf-pod udp-search` runs Run in one pod of the lab against
// `snorkel perf-pod udp-sink` (a Sink) in the other, and prints the Report
// as JSON, which package perf reads with Parse. A Sink counts one session
// at a time, the one a source started last; a source runs one trial at a
// time.
package udpsearch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"time"
)

// Defaults of the search.
const (
	// MaxLoss is the loss, in percent, a trial may have and pass.
	MaxLoss = 0.1
	// MaxTrials bounds the trials of one search, the probe included.
	MaxTrials = 8
	// udpSearchPrecision ends the search when the highest passing and the
	// lowest failing rate are this close, as a share of the latter.
	udpSearchPrecision = 0.02
	// OfferedShare is the share of the rate asked for that a paced
	// source must offer for its trial to test that rate.
	OfferedShare = 0.95
	// Bounds of a trial's length (TrialTime).
	TrialMin = 500 * time.Millisecond
	TrialMax = 2 * time.Second
)

// Where a search's bound came from.
const (
	BoundProbe = "probe"
	BoundFlag  = "udp-rate"
)

// TrialTime is the length of each trial for a run whose measurements
// send for d: an eighth of it, so that a search of MaxTrials trials
// takes about as long as another workload's measurement, within
// [TrialMin, TrialMax].
func TrialTime(d time.Duration) time.Duration {
	return min(max(d/MaxTrials, TrialMin), TrialMax)
}

// Options configures a search.
type Options struct {
	// Bound is the highest rate to try, in datagrams per second; 0 takes
	// it from an unpaced probe.
	Bound float64
	// MaxLoss is the loss in percent a passing trial may have; default
	// MaxLoss.
	MaxLoss float64
	// MaxTrials bounds the trials, the probe included; default
	// MaxTrials.
	MaxTrials int
}

func (o *Options) applyDefaults() {
	if o.MaxLoss == 0 {
		o.MaxLoss = MaxLoss
	}
	if o.MaxTrials == 0 {
		o.MaxTrials = MaxTrials
	}
}

// Report is what a search found; `snorkel perf-pod udp-search`
// prints it as JSON.
type Report struct {
	Payload      int     `json:"payload"`
	TrialSeconds float64 `json:"trialSeconds"`
	MaxLoss      float64 `json:"maxLossPercent"`
	MaxTrials    int     `json:"maxTrials"`
	// Bound is the highest rate the search would try, and BoundFrom where
	// it came from: BoundProbe or BoundFlag.
	Bound     float64 `json:"bound"`
	BoundFrom string  `json:"boundFrom"`
	// Trials are every trial in the order they ran; a probe is the first,
	// with rate 0.
	Trials []Trial `json:"trials"`
	// Found is set when a trial passed; Rate is then the rate its source
	// offered, in datagrams per second, and Loss its loss in percent.
	Found bool    `json:"found"`
	Rate  float64 `json:"rate"`
	Loss  float64 `json:"loss"`
	// AtBound is set when the trial at the bound passed: the source
	// offered no more (or --udp-rate capped the search), so the system
	// may forward more than Rate.
	AtBound bool `json:"atBound,omitempty"`
}

// trialFunc runs one trial at a rate, 0 for unpaced.
type trialFunc func(ctx context.Context, rate float64) (Trial, error)

// searchRate runs the search with trial; on an error it returns the
// trials until then with it.
func searchRate(ctx context.Context, o Options, trial trialFunc) (Report, error) {
	o.applyDefaults()
	r := Report{MaxLoss: o.MaxLoss, MaxTrials: o.MaxTrials, Bound: o.Bound, BoundFrom: BoundFlag}
	pass := func(t Trial) bool { return t.lossWithin(o.MaxLoss) && t.reached() }
	run := func(rate float64) (Trial, error) {
		t, err := trial(ctx, rate)
		if err != nil {
			return t, fmt.Errorf("udpsearch: trial at %.0f/s: %w", rate, err)
		}
		r.Trials = append(r.Trials, t)
		return t, nil
	}
	// lo passed (0 stands for nothing tried), hi failed or is the bound.
	var lo, hi, next float64
	if o.Bound > 0 {
		hi, next = o.Bound, o.Bound
	} else {
		r.BoundFrom = BoundProbe
		p, err := run(0)
		if err != nil {
			return r, err
		}
		r.Bound, hi = p.Offered(), p.Offered()
		if pass(p) {
			// The tunnel kept up with the source; no paced trial can
			// offer more.
			r.Found, r.Rate, r.Loss, r.AtBound = true, p.Offered(), p.Loss(), true
			return r, nil
		}
		next = p.ReceivedRate()
		if next <= 0 || next >= hi {
			next = hi / 2
		}
	}
	climbing := o.Bound <= 0
	for len(r.Trials) < o.MaxTrials && hi > 0 {
		t, err := run(next)
		if err != nil {
			return r, err
		}
		if pass(t) {
			lo = next
		} else {
			hi, climbing = next, false
		}
		if hi-lo <= udpSearchPrecision*hi {
			break
		}
		next = (lo + hi) / 2
		if climbing {
			next = min(2*lo, hi)
			if next == hi {
				climbing = false
				next = (lo + hi) / 2
			}
		}
	}
	if best, ok := bestTrial(r.Trials, o.MaxLoss); ok {
		r.Found, r.Rate, r.Loss, r.AtBound = true, best.Offered(), best.Loss(), best.Rate == o.Bound && best.reached()
	}
	return r, nil
}

// lossWithin reports whether the trial sent and lost at most maxLoss
// percent.
func (t Trial) lossWithin(maxLoss float64) bool { return t.Sent > 0 && t.Loss() <= maxLoss }

// reached reports whether the source offered the rate asked for; an
// unpaced trial asks for none.
func (t Trial) reached() bool { return t.Rate == 0 || t.Offered() >= OfferedShare*t.Rate }

// bestTrial returns the trial that offered the highest rate and lost at
// most maxLoss percent, if any did.
func bestTrial(trials []Trial, maxLoss float64) (Trial, bool) {
	var best Trial
	ok := false
	for _, t := range trials {
		if t.lossWithin(maxLoss) && (!ok || t.Offered() > best.Offered()) {
			best, ok = t, true
		}
	}
	return best, ok
}

// ClientOptions configures Run.
type ClientOptions struct {
	Server netip.AddrPort
	// Trial is the length of each trial.
	Trial time.Duration
	// Payload is the datagram payload size, at least 16; default
	// Payload.
	Payload int
	Options
}

// Run finds the highest rate at which datagrams reach a Sink
// at o.Server with at most o.MaxLoss percent lost.
func Run(ctx context.Context, o ClientOptions) (Report, error) {
	if o.Payload == 0 {
		o.Payload = Payload
	}
	if o.Trial <= 0 {
		return Report{}, fmt.Errorf("udpsearch: trial time %s: give a positive time", o.Trial)
	}
	if o.Bound < 0 {
		return Report{}, fmt.Errorf("udpsearch: bound %g: give datagrams per second, or 0 to probe", o.Bound)
	}
	src, err := dialSource(ctx, o.Server, o.Payload)
	if err != nil {
		return Report{}, err
	}
	defer src.Close()
	r, err := searchRate(ctx, o.Options, func(ctx context.Context, rate float64) (Trial, error) {
		return src.trial(ctx, rate, o.Trial)
	})
	r.Payload, r.TrialSeconds = o.Payload, o.Trial.Seconds()
	return r, err
}

// Parse reads a search's JSON report and checks that it
// holds together.
func Parse(b []byte) (Report, error) {
	var r Report
	if err := json.Unmarshal(b, &r); err != nil {
		return Report{}, fmt.Errorf("udpsearch: report: %w", err)
	}
	if err := r.check(); err != nil {
		return Report{}, fmt.Errorf("udpsearch: report: %w", err)
	}
	return r, nil
}

func (r Report) check() error {
	if len(r.Trials) == 0 {
		return errors.New("no trials")
	}
	if r.MaxTrials > 0 && len(r.Trials) > r.MaxTrials {
		return fmt.Errorf("%d trials, more than the %d allowed", len(r.Trials), r.MaxTrials)
	}
	if r.MaxLoss < 0 || r.MaxLoss >= 100 {
		return fmt.Errorf("tolerated loss %g%%", r.MaxLoss)
	}
	for i, t := range r.Trials {
		if t.Seconds <= 0 || t.Sent < 0 || t.SendErrors < 0 || t.Sent > math.MaxInt64-t.SendErrors || t.Rate < 0 {
			return fmt.Errorf("trial %d: %d sent in %gs at %g/s", i+1, t.Sent, t.Seconds, t.Rate)
		}
		if t.Received < 0 || t.Received > t.Sent {
			return fmt.Errorf("trial %d: %d received of %d sent", i+1, t.Received, t.Sent)
		}
	}
	if r.AtBound && (!r.Found || r.Trials[0].Rate != 0 && r.Trials[0].Rate != r.Bound) {
		return fmt.Errorf("at the bound %g/s, but found %v after a first trial at %g/s", r.Bound, r.Found, r.Trials[0].Rate)
	}
	best, ok := bestTrial(r.Trials, r.MaxLoss)
	switch {
	case !r.Found && ok:
		return fmt.Errorf("found nothing, but a trial at %.0f/s lost %.3f%%", best.Offered(), best.Loss())
	case r.Found && !ok:
		return fmt.Errorf("rate %g/s found, but every trial lost more than %g%%", r.Rate, r.MaxLoss)
	case r.Found && (best.Offered() != r.Rate || best.Loss() != r.Loss):
		return fmt.Errorf("rate %g/s with %g%% lost, but the best trial offered %g/s with %g%% lost", r.Rate, r.Loss, best.Offered(), best.Loss())
	}
	return nil
}
