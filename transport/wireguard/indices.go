package wireguard

import (
	"sync"
	"sync/atomic"
	"time"

	"golang.zx2c4.com/wireguard/device"
)

// indexLifetime bounds how long a sender index the device put in a handshake
// message can still be accepted as a receiver index (WireGuard paper §5.4.2,
// §5.4.3, §6). A handshake index waits for its response while the device
// retries (RekeyAttemptTime) and, once it gives up, until it zeroes the
// peer's key material RejectAfterTime×3 later; a session keyed from that
// response then takes transport messages for RejectAfterTime more.
const indexLifetime = device.RekeyAttemptTime + 4*device.RejectAfterTime

// maxIndices caps the table. Each peer adds an index per handshake, so this
// holds some five handshakes a second sustained over indexLifetime; past it
// the table stops dropping unknown indices rather than forget a live one.
const maxIndices = 4096

// handout is one index the device put in a handshake message.
type handout struct {
	// expires is the unix time in nanoseconds after which the index can no
	// longer be live.
	expires int64
	// owner is the public key of the peer the message went to; zero if
	// the message matched no current peer.
	owner Key
}

// indexSet is an immutable snapshot of the receiver indices that may be live.
type indexSet struct {
	expires map[uint32]handout
	// unsureUntil is non-zero while an index evicted to make room may still
	// be live: until then no index counts as unknown.
	unsureUntil int64
}

// indexTable learns the indices the device hands out from the handshake
// messages it sends, so that the receive filter can drop messages to indices
// the device would not find. Readers load a snapshot without locking;
// learning, which happens once per handshake, copies it.
type indexTable struct {
	mu  sync.Mutex
	set atomic.Pointer[indexSet]
}

func newIndexTable() *indexTable {
	t := &indexTable{}
	t.set.Store(&indexSet{expires: map[uint32]handout{}})
	return t
}

// known reports whether a message to index may reach a live session or
// handshake. It takes no clock: an expired entry lingers until the next
// learn, which only lets more through.
func (t *indexTable) known(index uint32) bool {
	s := t.set.Load()
	if s.unsureUntil != 0 {
		return true
	}
	_, ok := s.expires[index]
	return ok
}

// learn records index as handed out to owner at now.
func (t *indexTable) learn(index uint32, owner Key, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	old := t.set.Load()
	nowNs := now.UnixNano()
	next := &indexSet{expires: make(map[uint32]handout, len(old.expires)+1)}
	if old.unsureUntil > nowNs {
		next.unsureUntil = old.unsureUntil
	}
	for i, h := range old.expires {
		if h.expires > nowNs {
			next.expires[i] = h
		}
	}
	if _, ok := next.expires[index]; !ok && len(next.expires) >= maxIndices {
		oldest, oldestExp := uint32(0), int64(0)
		for i, h := range next.expires {
			if oldestExp == 0 || h.expires < oldestExp {
				oldest, oldestExp = i, h.expires
			}
		}
		delete(next.expires, oldest)
		next.unsureUntil = max(next.unsureUntil, oldestExp)
	}
	next.expires[index] = handout{expires: now.Add(indexLifetime).UnixNano(), owner: owner}
	t.set.Store(next)
}

// forget drops the indices handed out to owner, a peer the device no
// longer has: the device discards messages to them without a trace, so
// the filter must count them instead.
func (t *indexTable) forget(owner Key) {
	t.mu.Lock()
	defer t.mu.Unlock()
	old := t.set.Load()
	next := &indexSet{expires: make(map[uint32]handout, len(old.expires)), unsureUntil: old.unsureUntil}
	for i, h := range old.expires {
		if h.owner != owner {
			next.expires[i] = h
		}
	}
	t.set.Store(next)
}
