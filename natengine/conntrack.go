package natengine

import (
	"encoding/binary"
	"math/bits"
	"sync"
	"sync/atomic"
)

// A flow is one translated conversation between a local endpoint (pod,
// ClusterIP) and a remote one. The remote sees the local endpoint as the
// global one. Egress packets run local → remote and have their source
// rewritten to global; ingress packets run remote → global and have their
// destination rewritten to local. A flow started by Ingress (DNAT) keeps the
// port: lport == gport.
//
// Flows live in a slab of fixed pages and are found through two keys, one
// per direction, chained in one bucket array. The layout is pointer-free so
// the garbage collector never scans the table.
//
// The keys (addresses, ports, proto, kind) are written under Engine.mu before
// the flow is linked and do not change while it is; next is guarded by the
// stripe lock of the bucket it chains; gen and kind's live bit by Engine.mu;
// seen and st are atomics because both directions update them at once.
type flow struct {
	local, global, remote [16]byte
	lport, gport, rport   uint16
	proto                 uint8
	kind                  uint8
	next                  [2]uint32 // next node in the bucket of each key
	created               uint32
	gen                   uint32 // bumped on removal: stale references see it
	seen                  atomic.Uint32
	st                    atomic.Uint32
}

// flow.kind bits.
const (
	kindLive    = 1 << iota
	kindV6      // addresses are IPv6
	kindInbound // started by Ingress: egress packets are its replies
	kindEcho    // ICMP echo: the identifier stands for both ports
)

func (f *flow) echo() bool { return f.kind&kindEcho != 0 }

// The two keys of a flow, as packets carry them: egress (local, lport) →
// (remote, rport), and ingress (remote, rport) → (global, gport). An echo
// identifier fills both port fields of a packet, so an echo flow's remote
// "port" is the local identifier on one side and the global one on the other.
const (
	dirEgress  = 0
	dirIngress = 1
)

// key is a packet's tuple: a is the source, b the destination.
type key struct {
	a, b   [16]byte
	ap, bp uint16
	proto  uint8
	v6     bool
}

func (f *flow) key(dir uint32) key {
	k := key{proto: f.proto, v6: f.kind&kindV6 != 0}
	if dir == dirEgress {
		k.a, k.ap, k.b, k.bp = f.local, f.lport, f.remote, f.rport
		if f.echo() {
			k.bp = f.lport
		}
	} else {
		k.a, k.ap, k.b, k.bp = f.remote, f.rport, f.global, f.gport
		if f.echo() {
			k.ap = f.gport
		}
	}
	return k
}

func (f *flow) matches(dir uint32, k *key) bool {
	if f.proto != k.proto || (f.kind&kindV6 != 0) != k.v6 {
		return false
	}
	if dir == dirEgress {
		rp := f.rport
		if f.echo() {
			rp = f.lport
		}
		return f.lport == k.ap && rp == k.bp && f.local == k.a && f.remote == k.b
	}
	rp := f.rport
	if f.echo() {
		rp = f.gport
	}
	return f.gport == k.bp && rp == k.ap && f.global == k.b && f.remote == k.a
}

const (
	pageBits = 12
	pageSize = 1 << pageBits
	// numStripes locks for the buckets: enough that the egress goroutine
	// and the ingress goroutines rarely meet on one.
	numStripes = 1024
)

// stripe is a bucket lock padded to its own cache line.
type stripe struct {
	sync.Mutex
	_ [64 - 8]byte
}

// table is the connection-tracking table: the slab and the hash index.
// Lookups take one stripe lock; everything that links, unlinks or allocates
// runs under Engine.mu and takes stripe locks only to exclude lookups, so it
// may read chains without them.
type table struct {
	seed    uint64
	pages   []*[pageSize]flow // fixed length; a page is set before any of its flows is linked
	buckets []uint32          // node = flow index << 1 | dir; 0 ends a chain
	mask    uint64
	stripes []stripe

	// Under Engine.mu.
	used uint32 // slab slots handed out; slot 0 is never used
	free uint32 // head of the free list, chained through next[0]
	max  uint32
}

func newTable(maxFlows int, seed uint64) *table {
	// Two keys per flow in at least as many buckets: chains stay short
	// at the maximum.
	nb := uint64(1) << bits.Len64(uint64(2*maxFlows-1))
	return &table{
		seed:    seed,
		pages:   make([]*[pageSize]flow, (maxFlows+1+pageSize-1)/pageSize),
		buckets: make([]uint32, nb),
		mask:    nb - 1,
		stripes: make([]stripe, numStripes),
		max:     uint32(maxFlows),
	}
}

func (t *table) flow(i uint32) *flow { return &t.pages[i>>pageBits][i&(pageSize-1)] }

// hash mixes a key with the table's random seed, so that remote peers
// cannot aim their tuples at one bucket.
func (t *table) hash(k *key) uint64 {
	const (
		p0 = 0xa0761d6478bd642f
		p1 = 0xe7037ed1a0b428db
		p2 = 0x8ebc6af09c88c6e3
	)
	extra := uint64(k.ap)<<32 | uint64(k.bp)<<16 | uint64(k.proto)
	if k.v6 {
		extra |= 1 << 48
	}
	h := mix(t.seed^binary.LittleEndian.Uint64(k.a[:8]), binary.LittleEndian.Uint64(k.a[8:])^p0)
	h = mix(h^binary.LittleEndian.Uint64(k.b[:8]), binary.LittleEndian.Uint64(k.b[8:])^p1)
	return mix(h^extra, p2)
}

func mix(a, b uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	return hi ^ lo
}

// lookup finds the flow with key k and returns it with the stripe that
// guards it locked, or s == nil when there is none (and nothing locked).
// The caller unlocks s when it is done with f.
func (t *table) lookup(k *key) (f *flow, dir uint32, s *stripe) {
	b := t.hash(k) & t.mask
	s = &t.stripes[b&(numStripes-1)]
	s.Lock()
	for n := t.buckets[b]; n != 0; {
		f = t.flow(n >> 1)
		if f.matches(n&1, k) {
			return f, n & 1, s
		}
		n = f.next[n&1]
	}
	s.Unlock()
	return nil, 0, nil
}

// find is lookup for a holder of Engine.mu, which needs no stripe lock to
// read chains. It returns the flow index, or 0.
func (t *table) find(k *key) (uint32, uint32) {
	for n := t.buckets[t.hash(k)&t.mask]; n != 0; {
		f := t.flow(n >> 1)
		if f.matches(n&1, k) {
			return n >> 1, n & 1
		}
		n = f.next[n&1]
	}
	return 0, 0
}

// alloc returns a free slot, or 0 when the slab is at its maximum. Under
// Engine.mu.
func (t *table) alloc() uint32 {
	if i := t.free; i != 0 {
		f := t.flow(i)
		t.free = f.next[0]
		f.next[0] = 0
		return i
	}
	if t.used >= t.max {
		return 0
	}
	t.used++
	i := t.used
	if t.pages[i>>pageBits] == nil {
		t.pages[i>>pageBits] = new([pageSize]flow)
	}
	return i
}

// link makes flow i findable by both its keys. Under Engine.mu.
func (t *table) link(i uint32) {
	f := t.flow(i)
	for dir := uint32(0); dir < 2; dir++ {
		k := f.key(dir)
		b := t.hash(&k) & t.mask
		s := &t.stripes[b&(numStripes-1)]
		s.Lock()
		f.next[dir] = t.buckets[b]
		t.buckets[b] = i<<1 | dir
		s.Unlock()
	}
}

// unlink removes both keys of flow i and returns its slot to the free list.
// Under Engine.mu. Once a key's stripe is released no lookup holds the flow
// through that key, so the slot may be reused.
func (t *table) unlink(i uint32) {
	f := t.flow(i)
	for dir := uint32(0); dir < 2; dir++ {
		k := f.key(dir)
		b := t.hash(&k) & t.mask
		s := &t.stripes[b&(numStripes-1)]
		node := i<<1 | dir
		s.Lock()
		p := &t.buckets[b]
		for *p != 0 && *p != node {
			p = &t.flow(*p >> 1).next[*p&1]
		}
		if *p == node {
			*p = f.next[dir]
		}
		s.Unlock()
	}
	f.kind &^= kindLive
	f.gen++
	f.next = [2]uint32{t.free, 0}
	t.free = i
}
