// Package transporttest holds what the transports' tests share: measuring
// a hot path's allocations, comparing drop counters, and a loopback NAT
// whose mapping a test rebinds.
package transporttest

import (
	"fmt"
	"testing"
	"time"

	"github.com/snorkel-net/snorkel/transport"
)

// FewestAllocs is the fewest allocations per run of f over three
// testing.AllocsPerRun measurements of runs each. AllocsPerRun counts
// every allocation of the process, so one made meanwhile by another
// goroutine (a transport's receive loop, a pool refilled after a
// collection) can land in one measurement on a loaded machine; an
// allocation on f's own path lands in all three.
func FewestAllocs(runs int, f func()) float64 {
	fewest := testing.AllocsPerRun(runs, f)
	for i := 1; i < 3 && fewest > 0; i++ {
		fewest = min(fewest, testing.AllocsPerRun(runs, f))
	}
	return fewest
}

// DropsDiff compares a transport's drop counters with want, keyed by peer
// and reason with Count zero, and says each difference: a count that is
// not the one wanted, or a drop counted that none was wanted of.
func DropsDiff(got []transport.Drop, want map[transport.Drop]uint64) []string {
	have := make(map[transport.Drop]uint64, len(got))
	for _, d := range got {
		have[transport.Drop{Peer: d.Peer, Reason: d.Reason}] = d.Count
	}
	var diffs []string
	for k, n := range want {
		if have[k] != n {
			diffs = append(diffs, fmt.Sprintf("%d %s drops for peer %d, want %d", have[k], k.Reason, k.Peer, n))
		}
	}
	for k, n := range have {
		if _, ok := want[k]; !ok {
			diffs = append(diffs, fmt.Sprintf("%d %s drops for peer %d, want none", n, k.Reason, k.Peer))
		}
	}
	return diffs
}

// WaitForDrops waits until dc has counted n drops in all, checking every
// 10 ms, and fails t if that has not happened within.
func WaitForDrops(t testing.TB, dc transport.DropCounter, n uint64, within time.Duration) {
	t.Helper()
	total := func() uint64 {
		var s uint64
		for _, d := range dc.Drops() {
			s += d.Count
		}
		return s
	}
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(within)
	for total() < n {
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("%d drops counted within %v, want %d: %v", total(), within, n, dc.Drops())
		}
	}
}
