package esp

import (
	"math"
	"math/big"
	"math/rand/v2"
	"testing"
)

// reset empties the window and puts its top at top.
func (w *window) reset(top uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.top = top
	w.ring = [windowBlocks]uint64{}
}

// accept is what open does with the window for a 32-bit sequence number:
// check, then commit.
func (w *window) accept(seq uint64) bool {
	got, ok := w.check(uint32(seq), false)
	return ok && got == seq && w.commit(seq)
}

func TestWindowEdges(t *testing.T) {
	const w = windowSize
	steps := []struct {
		seq  uint64
		want bool
		why  string
	}{
		{1, true, "first packet"},
		{1, false, "duplicate"},
		{0, false, "sequence number 0 is never sent"},
		{5, true, "ahead"},
		{3, true, "out of order within the window"},
		{3, false, "duplicate out of order"},
		{5000, true, "jump ahead"},
		{5000 - w + 1, true, "oldest number inside the window"},
		{5000 - w, false, "just below the window"},
		{5000 - w + 1, false, "duplicate at the bottom edge"},
		{4999, true, "just below the top"},
		{5001, true, "slide by one"},
		{5001 + 64*windowBlocks, true, "jump by exactly the ring, onto 5001's word"},
		{4999 + 64*windowBlocks, true, "the word was cleared: 4999's bit does not linger"},
		{5001 + 64*40, true, "jump further than the whole ring"},
		{5001 + 64*40 - w + 1, true, "bottom of the window after the jump, its word cleared"},
		{5001, false, "left behind by the jump"},
		{5001 + 64*40 - 1, true, "just below the new top"},
		{5001 + 64*41, true, "slide by one word"},
		{5001 + 64*40, false, "duplicate remembered across the slide"},
		{5001 + 64*40 - 1, false, "duplicate remembered across the slide, previous word"},
	}
	var win window
	for _, s := range steps {
		if got := win.accept(s.seq); got != s.want {
			t.Fatalf("%s: accept(%d) = %v, want %v", s.why, s.seq, got, s.want)
		}
	}
}

// refWindow is the obviously correct anti-replay window: a set of every
// number seen and the highest.
type refWindow struct {
	top  uint64
	seen map[uint64]bool
}

func (r *refWindow) accept(seq uint64) bool {
	if seq == 0 || r.seen[seq] || seq <= r.top && r.top-seq >= windowSize {
		return false
	}
	r.seen[seq] = true
	r.top = max(r.top, seq)
	return true
}

func TestWindowMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var win window
	ref := refWindow{seen: map[uint64]bool{}}
	var top uint64
	for i := range 200_000 {
		// Mostly near the top, behind and ahead, sometimes far ahead.
		var seq uint64
		switch r := rng.IntN(100); {
		case r < 2:
			seq = top + uint64(rng.IntN(10_000))
		case r < 50:
			seq = top + uint64(rng.IntN(70))
		default:
			seq = max(top, 2500) - uint64(rng.IntN(2500))
		}
		top = max(top, seq)
		if got, want := win.accept(seq), ref.accept(seq); got != want {
			t.Fatalf("step %d: accept(%d) with top %d = %v, reference says %v", i, seq, ref.top, got, want)
		}
	}
}

// refInferSeq is the rule of RFC 4303 Appendix A2.2 read literally: of the
// numbers with low half low, the one in [top-W+1, top-W+2^32], worked out
// with big integers.
func refInferSeq(top uint64, low uint32) (uint64, bool) {
	t := new(big.Int).SetUint64(top)
	lo := new(big.Int).Sub(t, big.NewInt(windowSize-1))
	hi := new(big.Int).Add(lo, new(big.Int).Lsh(big.NewInt(1), 32))
	th := int64(top >> 32)
	for _, h := range []int64{th - 1, th, th + 1} {
		s := new(big.Int).Lsh(big.NewInt(h), 32)
		s.Add(s, big.NewInt(int64(low)))
		if s.Cmp(lo) >= 0 && s.Cmp(hi) < 0 {
			if s.Sign() < 0 || !s.IsUint64() {
				return 0, false
			}
			return s.Uint64(), true
		}
	}
	return 0, false
}

func TestInferSeqMatchesReference(t *testing.T) {
	const w = windowSize
	tops := []uint64{0, 1, w - 2, w - 1, w, 1<<32 - 1, 1 << 32, 1<<32 + w - 2, 1<<32 + w - 1,
		0x8765432100000000, math.MaxUint64, math.MaxUint64 - w, 0xffffffff00000000}
	rng := rand.New(rand.NewPCG(3, 4))
	for range 200 {
		tops = append(tops, rng.Uint64(), rng.Uint64()&0xffffffff, rng.Uint64()|0xfffff000)
	}
	for _, top := range tops {
		tl := uint32(top)
		lows := []uint32{0, 1, tl, tl + 1, tl - 1, tl - (w - 1), tl - w, tl - (w - 2), math.MaxUint32, rng.Uint32()}
		for _, low := range lows {
			got, gotOK := inferSeq(top, low)
			want, wantOK := refInferSeq(top, low)
			if got != want || gotOK != wantOK {
				t.Fatalf("inferSeq(%#x, %#x) = %#x, %v; reference %#x, %v", top, low, got, gotOK, want, wantOK)
			}
		}
	}
}

func TestInferSeqCases(t *testing.T) {
	tests := []struct {
		name string
		top  uint64
		low  uint32
		want uint64
		ok   bool
	}{
		{"same subspace", 0x5_00001000, 0x00000f00, 0x5_00000f00, true},
		{"next subspace (case A)", 0x5_fffffff0, 0x00000002, 0x6_00000002, true},
		{"previous subspace (case B)", 0x6_00000002, 0xfffffff0, 0x5_fffffff0, true},
		{"ahead in the same subspace (case B)", 0x6_00000002, 0x00000010, 0x6_00000010, true},
		{"before sequence number 1", 0, 0xffffffff, 0, false},
		{"beyond 2^64-1", math.MaxUint64, 0x00000001, 0, false},
	}
	for _, tt := range tests {
		got, ok := inferSeq(tt.top, tt.low)
		if got != tt.want || ok != tt.ok {
			t.Errorf("%s: inferSeq(%#x, %#x) = %#x, %v; want %#x, %v", tt.name, tt.top, tt.low, got, ok, tt.want, tt.ok)
		}
	}
}
