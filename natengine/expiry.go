package natengine

import "math/bits"

// ref names one life of a flow: a slot and its sequence number while linked.
// A ref outlives the flow harmlessly; the sequence number tells it is stale.
type ref struct{ idx, seq uint32 }

// wheel is a timing wheel of one-second slots spanning the longest timeout.
// Every live flow has one ref in the slot of the second it must next be
// looked at. Looking does not trust the slot: it reads the flow's last-seen
// time and state, expires it if idle long enough, and otherwise moves the ref
// to the slot of its real deadline. Packets therefore never touch the wheel,
// and expiry visits each flow about once per timeout instead of scanning the
// table. A slot is a list of fixed chunks, so that a slot a million flows
// fall into grows without copying. Under Engine.mu.
type wheel struct {
	slots []*chunk // each slot's chunks, the one being filled first
	mask  uint32
	done  uint32 // the last second whose slot has been taken for processing
	cur   *chunk // the slot being processed, taken out of the wheel
	free  *chunk // drained chunks, for reuse
}

// chunkRefs fills a chunk to 1 KiB.
const chunkRefs = 126

type chunk struct {
	refs [chunkRefs]ref
	n    int
	next *chunk
}

func newWheel(span, now uint32) *wheel {
	n := uint32(1) << bits.Len32(span+1)
	return &wheel{slots: make([]*chunk, n), mask: n - 1, done: now}
}

// add schedules r at second at. A slot already taken would hold it for a
// whole turn, so a time not after w.done (a clock that stepped back) is
// taken as the next second.
func (w *wheel) add(r ref, at uint32) {
	if int32(at-w.done) <= 0 {
		at = w.done + 1
	}
	s := &w.slots[at&w.mask]
	c := *s
	if c == nil || c.n == chunkRefs {
		c = w.free
		if c != nil {
			w.free, c.n = c.next, 0
		} else {
			c = new(chunk)
		}
		c.next, *s = *s, c
	}
	c.refs[c.n] = r
	c.n++
}

// next returns the next ref due by now, or false when none is. It takes the
// slots of the seconds up to now in turn; a ref re-added during processing
// lands in a slot not yet taken.
func (w *wheel) next(now uint32) (ref, bool) {
	for {
		if c := w.cur; c != nil {
			if c.n > 0 {
				c.n--
				return c.refs[c.n], true
			}
			w.cur, c.next, w.free = c.next, w.free, c
			continue
		}
		if int32(now-w.done) <= 0 {
			return ref{}, false
		}
		if now-w.done > w.mask+1 {
			// The clock jumped past a whole turn: every slot is due once.
			w.done = now - w.mask - 1
		}
		w.done++
		s := &w.slots[w.done&w.mask]
		w.cur, *s = *s, nil
	}
}

// ring is a bounded FIFO of refs: the flows that may be evicted, oldest
// first. When full, pushing forgets the oldest, which can then still expire
// but no longer be evicted. Under Engine.mu.
type ring struct {
	buf  []ref
	head int
	n    int
}

func newRing(n int) *ring { return &ring{buf: make([]ref, n)} }

func (r *ring) push(x ref) {
	if r.n == len(r.buf) {
		r.head = (r.head + 1) % len(r.buf)
		r.n--
	}
	r.buf[(r.head+r.n)%len(r.buf)] = x
	r.n++
}

func (r *ring) pop() (ref, bool) {
	if r.n == 0 {
		return ref{}, false
	}
	x := r.buf[r.head]
	r.head = (r.head + 1) % len(r.buf)
	r.n--
	return x, true
}
