package udp

import (
	"slices"
	"testing"
)

type byPeer struct{ calls [][]string }

func (r *byPeer) Deliver(peer int, bufs [][]byte, offset int) {
	call := []string{string(rune('0' + peer))}
	for _, b := range bufs {
		call = append(call, string(b[offset:]))
	}
	r.calls = append(r.calls, call)
}

// TestGrouperDeliversPeerByPeerInArrivalOrder: one Deliver per peer, in the
// order each peer first appears, its packets in arrival order; packets not
// added are left out, and the Grouper is empty afterwards.
func TestGrouperDeliversPeerByPeerInArrivalOrder(t *testing.T) {
	bufs := [][]byte{[]byte("xa"), []byte("xb"), []byte("xskip"), []byte("xc"), []byte("xd")}
	g := NewGrouper()
	for i, p := range []int{1, 0, -1, 1, 0} {
		if p >= 0 {
			g.Add(i, p)
		}
	}
	var r byPeer
	g.Deliver(&r, bufs, 1)
	want := [][]string{{"1", "a", "c"}, {"0", "b", "d"}}
	if !slices.EqualFunc(r.calls, want, slices.Equal) {
		t.Fatalf("Deliver calls %q, want %q", r.calls, want)
	}
	g.Deliver(&r, bufs, 1)
	if len(r.calls) != 2 {
		t.Fatalf("a second Deliver delivered again: %q", r.calls[2:])
	}
}
