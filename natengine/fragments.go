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

// fragments are the mappings of first fragments, kept so that the
// fragments after them, which carry no ports, are translated alike. An
// entry cannot tell when its datagram is complete (fragments may come in any
// order), so it stays until fragTimeout, and a table that refused new
// entries when full would let anyone who sends first fragments and never
// the rest starve every other source's fragmented traffic. Instead the table
// never refuses: a source at its share gives up its own oldest entry, and a
// full table gives up its oldest one. Both are O(1): entries sit in a slab,
// in one list in arrival order (doubly linked, since a source's oldest may be
// anywhere in it) and in their source's list (singly linked, since the
// oldest of a source is always the one to go: the table's oldest entry is
// also its source's). The maps are sized for the table when it is made, so
// the steady state allocates nothing.
type fragments struct {
	mu        sync.Mutex
	m         map[fragKey]int32
	srcs      map[source]int32
	e         []fragEntry  // slab; entry 0 is the lists' end
	s         []fragSource // slab; record 0 unused
	freeE     int32        // free entries, chained through next
	freeS     int32        // free source records, chained through head
	old, new  int32        // the arrival list's ends
	n         int
	perSource int32
}

type fragEntry struct {
	k          fragKey
	to         [16]byte // the address the translation writes
	at         uint32   // when the first fragment was seen
	src        int32
	prev, next int32 // arrival order, older and newer
	snext      int32 // the source's next newer entry
}

type fragSource struct {
	src        source
	head, tail int32 // oldest and newest entry
	n          int32
}

func newFragments(max, perSource int) *fragments {
	t := &fragments{
		m:         make(map[fragKey]int32, max),
		srcs:      make(map[source]int32, max),
		e:         make([]fragEntry, max+1),
		s:         make([]fragSource, max+1),
		perSource: int32(perSource),
	}
	for i := int32(max); i > 0; i-- {
		t.e[i].next, t.freeE = t.freeE, i
		t.s[i].head, t.freeS = t.freeS, i
	}
	return t
}

func fragKeyOf(p *packet.Parsed) fragKey {
	return fragKey{src: p.Src, dst: p.Dst, id: p.FragID, proto: p.Proto, v6: p.Version == 6}
}

// record remembers that the datagram of first fragment p, from source src,
// translates to address to, counting into c what it evicts for it.
func (t *fragments) record(p *packet.Parsed, src source, to [16]byte, now uint32, c *counters) {
	k := fragKeyOf(p)
	t.mu.Lock()
	defer t.mu.Unlock()
	if i, ok := t.m[k]; ok {
		// A resent first fragment: same datagram, same translation.
		t.e[i].to = to
		return
	}
	t.expire(now)
	si, ok := t.srcs[src]
	switch {
	case ok && t.s[si].n >= t.perSource:
		t.remove(t.s[si].head)
		c.evictions[EvictFragmentSourceLimit].Add(1)
	case t.freeE == 0:
		t.remove(t.old)
		c.evictions[EvictFragmentTableFull].Add(1)
	}
	// The eviction may have taken the source's last entry, and its record.
	if si, ok = t.srcs[src]; !ok {
		si, t.freeS = t.freeS, t.s[t.freeS].head
		t.s[si] = fragSource{src: src}
		t.srcs[src] = si
	}
	i := t.freeE
	t.freeE = t.e[i].next
	t.e[i] = fragEntry{k: k, to: to, at: now, src: si, prev: t.new}
	if t.new != 0 {
		t.e[t.new].next = i
	} else {
		t.old = i
	}
	t.new = i
	s := &t.s[si]
	if s.tail != 0 {
		t.e[s.tail].snext = i
	} else {
		s.head = i
	}
	s.tail = i
	s.n++
	t.m[k] = i
	t.n++
}

// remove deletes entry i, which is the oldest of its source.
func (t *fragments) remove(i int32) {
	e := &t.e[i]
	if e.prev != 0 {
		t.e[e.prev].next = e.next
	} else {
		t.old = e.next
	}
	if e.next != 0 {
		t.e[e.next].prev = e.prev
	} else {
		t.new = e.prev
	}
	s := &t.s[e.src]
	if s.head = e.snext; s.head == 0 {
		s.tail = 0
	}
	if s.n--; s.n == 0 {
		delete(t.srcs, s.src)
		s.head, t.freeS = t.freeS, e.src
	}
	delete(t.m, e.k)
	e.next, t.freeE = t.freeE, i
	t.n--
}

// lookup returns the address the datagram of non-first fragment p
// translates to.
func (t *fragments) lookup(p *packet.Parsed, now uint32) ([16]byte, bool) {
	k := fragKeyOf(p)
	t.mu.Lock()
	defer t.mu.Unlock()
	i, ok := t.m[k]
	if !ok || now-t.e[i].at >= fragTimeout {
		return [16]byte{}, false
	}
	return t.e[i].to, true
}

func (t *fragments) expire(now uint32) {
	for t.old != 0 && now-t.e[t.old].at >= fragTimeout {
		t.remove(t.old)
	}
}

func (t *fragments) len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.n
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
