package esp

import (
	"math"
	"sync"
)

// The anti-replay window (RFC 4303 §3.4.3) is a bitmap of windowBlocks
// 64-bit words used as a ring (RFC 6479 §2). One word is always the one
// the highest sequence number falls in, partly ahead of it, so the window
// proper is the rest: a packet up to windowSize-1 below the highest is
// still accepted once.
const (
	windowBlocks = 32
	windowSize   = (windowBlocks - 1) * 64 // 1984
)

// window is the anti-replay state of one inbound SA. check runs before the
// ICV is verified and commit after it, so that a forged packet never moves
// the window. A mutex covers both because the receive loops of the two
// address families may open packets of one SA at once: two copies of one
// packet may both pass check, but only one commits.
type window struct {
	mu   sync.Mutex
	top  uint64 // the highest sequence number committed; 0 before the first
	ring [windowBlocks]uint64
}

// check returns the full sequence number of a packet whose low 32 bits are
// low, inferring the high ones with ESN, and whether it may be new.
func (w *window) check(low uint32, esn bool) (uint64, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	seq := uint64(low)
	if esn {
		var ok bool
		if seq, ok = inferSeq(w.top, low); !ok {
			return 0, false
		}
	}
	return seq, w.fresh(seq)
}

// commit enters seq, which has authenticated, into the window and slides
// the window forward if seq is the highest yet. It reports false if seq is
// no longer fresh: a copy committed in the meantime, or the window moved
// past it.
func (w *window) commit(seq uint64) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.fresh(seq) {
		return false
	}
	if seq > w.top {
		// Clear the words that come into the window (RFC 6479 §2); a jump
		// of a whole ring or more clears them all.
		from, n := w.top/64+1, min(seq/64-w.top/64, windowBlocks)
		for i := range n {
			w.ring[(from+i)%windowBlocks] = 0
		}
		w.top = seq
	}
	w.ring[seq/64%windowBlocks] |= 1 << (seq % 64)
	return true
}

// fresh reports whether seq lies in or beyond the window and has not been
// committed. Sequence number 0 is never sent (RFC 4303 §3.3.3).
func (w *window) fresh(seq uint64) bool {
	switch {
	case seq == 0:
		return false
	case seq > w.top:
		return true
	case w.top-seq >= windowSize:
		return false
	}
	return w.ring[seq/64%windowBlocks]&(1<<(seq%64)) == 0
}

// inferSeq reconstructs a 64-bit sequence number from its low 32 bits and
// the highest one received, top (RFC 4303 Appendix A2.2): the high half is
// the one that places the number in [top-windowSize+1, top-windowSize+2^32].
// It reports false when that would be below 0 or above 2^64-1.
func inferSeq(top uint64, low uint32) (uint64, bool) {
	th, tl := uint32(top>>32), uint32(top)
	const w = windowSize
	hi := th
	if tl >= w-1 {
		// Case A: the window lies within one 2^32 subspace; a low half
		// below its bottom belongs to the next subspace.
		if low < tl-(w-1) {
			if th == math.MaxUint32 {
				return 0, false
			}
			hi = th + 1
		}
	} else if low >= tl-(w-1) {
		// Case B: the window reaches back into the previous subspace
		// (tl-(w-1) wraps around 2^32); a low half at or above its bottom
		// belongs there.
		if th == 0 {
			return 0, false
		}
		hi = th - 1
	}
	return uint64(hi)<<32 | uint64(low), true
}
