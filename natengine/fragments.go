package natengine

import (
	"sync"

	"github.com/snorkel-net/snorkel/packet"
)

// fragTimeout is how long a first fragment's mapping waits for the rest of
// its datagram: the reassembly timeout of RFC 8200, section 4.5 (60 s), which
// also exceeds what IPv4 hosts wait (RFC 1122, section 3.3.2).
const fragTimeout = 60

// fragKey names a fragmented datagram by the addresses it had before
// translation, its protocol and IP identification (RFC 791; RFC 8200,
// section 4.5).
type fragKey struct {
	src, dst [16]byte
	id       uint32
	proto    uint8
	v6       bool
}

type fragEntry struct {
	to [16]byte // the address the translation writes
	at uint32   // when the first fragment was seen
}

// fragments are the mappings of first fragments, kept so that the
// fragments after them, which carry no ports, are translated alike. The
// table is bounded; entries leave in arrival order once fragTimeout old.
type fragments struct {
	mu    sync.Mutex
	m     map[fragKey]fragEntry
	order []fragKey // FIFO ring of the entries' keys, oldest at head
	head  int
	n     int
}

func newFragments(max int) *fragments {
	return &fragments{m: make(map[fragKey]fragEntry, max), order: make([]fragKey, max)}
}

func fragKeyOf(p *packet.Parsed) fragKey {
	return fragKey{src: p.Src, dst: p.Dst, id: p.FragID, proto: p.Proto, v6: p.Version == 6}
}

// record remembers that the datagram of first fragment p translates to
// address to; false when the table is full of live entries.
func (t *fragments) record(p *packet.Parsed, to [16]byte, now uint32) bool {
	k := fragKeyOf(p)
	t.mu.Lock()
	defer t.mu.Unlock()
	if e, ok := t.m[k]; ok {
		// A resent first fragment: same datagram, same translation.
		e.to = to
		t.m[k] = e
		return true
	}
	t.expire(now)
	if t.n == len(t.order) {
		return false
	}
	t.m[k] = fragEntry{to: to, at: now}
	t.order[(t.head+t.n)%len(t.order)] = k
	t.n++
	return true
}

// lookup returns the address the datagram of non-first fragment p
// translates to.
func (t *fragments) lookup(p *packet.Parsed, now uint32) ([16]byte, bool) {
	k := fragKeyOf(p)
	t.mu.Lock()
	defer t.mu.Unlock()
	e, ok := t.m[k]
	if !ok || now-e.at >= fragTimeout {
		return [16]byte{}, false
	}
	return e.to, true
}

func (t *fragments) expire(now uint32) {
	for t.n > 0 {
		k := &t.order[t.head]
		if now-t.m[*k].at < fragTimeout {
			return
		}
		delete(t.m, *k)
		t.head = (t.head + 1) % len(t.order)
		t.n--
	}
}

func (t *fragments) len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.m)
}

// egressFragment translates non-first fragment p like its first fragment
// was. When that was not seen (fragments out of order), the rules still tell
// the source address of most datagrams, since the address a local host
// takes does not depend on ports: a ClusterIP answers from its service's
// global IP, anything else leaves as a new flow would.
func (e *Engine) egressFragment(s *snapshot, b []byte, p *packet.Parsed, now uint32) bool {
	to, ok := e.frags.lookup(p, now)
	if !ok {
		if !s.isLocal(&p.Src) {
			return true
		}
		if i, svc := s.svcIP[p.Src]; svc {
			to, ok = s.ingress[i].global, true
		} else {
			to, ok = s.egressAddr(&p.Src)
		}
		if !ok {
			return e.drop(DropFragmentUnknown)
		}
	}
	packet.SetSrcAddr(b, p, to)
	return true
}

// ingressFragment translates non-first fragment p like its first fragment
// was. When that was not seen, only a fragment for an ingress rule's global
// IP can be translated, because that IP has one local address; a global
// egress IP is shared by many pods, told apart by the ports this fragment
// lacks.
func (e *Engine) ingressFragment(s *snapshot, b []byte, p *packet.Parsed, now uint32) bool {
	to, ok := e.frags.lookup(p, now)
	if !ok {
		i, rule := s.byGlob[p.Dst]
		if !rule {
			return e.drop(DropFragmentUnknown)
		}
		to = s.ingress[i].local
	}
	packet.SetDstAddr(b, p, to)
	return true
}
