package natengine

import (
	"sync"
	"sync/atomic"
	"time"
)

// coarseTick is the resolution of the default clock. The engine counts
// seconds, and timeouts are minutes long.
const coarseTick = 100 * time.Millisecond

// coarse is the process-wide default clock: one goroutine, started with the
// first engine that uses it, stores the monotonic time since start, so that
// packets read an atomic instead of calling time.Now.
var coarse struct {
	once  sync.Once
	start time.Time
	since atomic.Uint64 // nanoseconds
}

func startCoarse() {
	coarse.start = time.Now()
	go func() {
		for range time.Tick(coarseTick) {
			coarse.since.Store(uint64(time.Since(coarse.start)))
		}
	}()
}

// coarseSince returns the default clock as time since its start, starting
// it first if need be. Engines on the default clock start it in New and read
// coarse.since per packet, instead of a time.Time.
func coarseSince() time.Duration {
	coarse.once.Do(startCoarse)
	return time.Duration(coarse.since.Load())
}
