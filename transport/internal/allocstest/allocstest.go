// Package allocstest measures the allocations of a transport's hot path
// in tests.
package allocstest

import "testing"

// Fewest is the fewest allocations per run of f over three
// testing.AllocsPerRun measurements of runs each. AllocsPerRun counts
// every allocation of the process, so one made meanwhile by another
// goroutine (a transport's receive loop, a pool refilled after a
// collection) can land in one measurement on a loaded machine; an
// allocation on f's own path lands in all three.
func Fewest(runs int, f func()) float64 {
	fewest := testing.AllocsPerRun(runs, f)
	for i := 1; i < 3 && fewest > 0; i++ {
		fewest = min(fewest, testing.AllocsPerRun(runs, f))
	}
	return fewest
}
