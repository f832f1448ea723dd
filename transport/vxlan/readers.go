package vxlan

import (
	"sync/atomic"
	"time"
)

// readers lets a writer that has replaced the peer table wait until no batch
// still holds the table it replaced. Readers never block: each counts
// itself in one of two epochs for as long as it holds a table.
type readers struct {
	epoch  atomic.Uint32
	active [2]atomic.Int64
}

// enter marks a batch as holding the table it loads next; pass the result
// to exit when the batch is done with it.
func (r *readers) enter() uint32 {
	e := r.epoch.Load() & 1
	r.active[e].Add(1)
	return e
}

func (r *readers) exit(e uint32) { r.active[e].Add(-1) }

// wait returns once every batch that loaded the table before the call has
// exited. Such a batch counted itself before the table was replaced, in
// either epoch, so wait drains both. It flips the epoch before draining
// one, so that batches entering meanwhile count themselves in the other
// and the drain ends.
func (r *readers) wait() {
	for range 2 {
		old := (r.epoch.Add(1) - 1) & 1
		for delay := time.Microsecond; r.active[old].Load() != 0; delay = min(2*delay, time.Millisecond) {
			time.Sleep(delay)
		}
	}
}
