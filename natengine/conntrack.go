package natengine

import (
	"encoding/binary"
	"fmt"
	"math/bits"
	"runtime"
	"sync/atomic"

	"github.com/snorkel-net/snorkel/packet"
)

// A flow is one translated conversation between a local endpoint (pod,
// ClusterIP) and a remote one. The remote sees the local endpoint as the
// global one. Egress packets run local → remote and have their source
// rewritten to global; ingress packets run remote → global and have their
// destination rewritten to local. A flow started by Ingress (DNAT) keeps the
// port: lport == gport.
//
// Flows live in a slab of fixed pages and are found through two keys, one
// per direction, in one open-addressed index. The layout is pointer-free so
// the garbage collector never scans the table.
//
// Packets look flows up without a lock, seqlock-style. Everything that
// changes the table's structure runs under Engine.mu: it writes a slot's keys
// and translation (proto, kind, addresses, ports, created) while the slot is
// unlinked, and publishes through atomics — the index entries, and the
// sequence number in the high half of the state word, odd while the flow is
// linked and bumped on every link and unlink. A reader copies what it needs
// and then checks that the sequence number has not moved; if it has, the
// copy may be torn and is thrown away. seen and the low half of state (the
// FlowState and what has been seen) are atomics because both directions
// update them at once.
type flow struct {
	local, global, remote [16]byte
	lport, gport, rport   uint16
	proto                 uint8
	kind                  uint8
	// created is the second the flow began; while the slot is free, it
	// holds the next free slot instead.
	created uint32
	// owner is the id of the flow's source in Engine.shares.
	owner uint32
	seen  atomic.Uint32
	state atomic.Uint64 // sequence << 32 | state word
}

// seq returns the flow's sequence number: odd while it is linked.
func (f *flow) seq() uint32 { return uint32(f.state.Load() >> 32) }

// linked reports whether the flow is live, findable by its keys.
func (f *flow) linked() bool { return f.seq()&1 != 0 }

// st returns the flow's state word (state.go).
func (f *flow) st() uint32 { return uint32(f.state.Load()) }

// flow.kind bits.
const (
	kindV6      = 1 << iota // addresses are IPv6
	kindInbound             // started by Ingress: egress packets are its replies
	kindEcho                // ICMP echo: the identifier stands for both ports
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

// of sets k to packet p's tuple. It writes k field by field: a key built
// as a literal and copied whole is read back across the smaller stores that
// built it, which stalls the load.
func (k *key) of(p *packet.Parsed) {
	k.a, k.b = p.Src, p.Dst
	k.ap, k.bp = p.SrcPort, p.DstPort
	k.proto, k.v6 = p.Proto, p.Version == 6
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

// matches reports whether key k is the flow's key in direction dir. It
// serves lookup too, so the race detector looks away here as well.
//
//go:norace
func (f *flow) matches(dir uint32, k *key) bool {
	if dir == dirEgress {
		return f.matchesEgress(k)
	}
	return f.matchesIngress(k)
}

// matchesEgress is matches for the egress key: (local, lport) → (remote,
// rport), or for an echo flow the local identifier for both ports.
//
//go:norace
func (f *flow) matchesEgress(k *key) bool {
	bp := f.rport
	if f.echo() {
		bp = f.lport
	}
	return f.proto == k.proto && (f.kind&kindV6 != 0) == k.v6 && f.lport == k.ap && bp == k.bp && f.local == k.a && f.remote == k.b
}

// matchesIngress is matches for the ingress key: (remote, rport) →
// (global, gport), or for an echo flow the global identifier for both
// ports.
//
//go:norace
func (f *flow) matchesIngress(k *key) bool {
	ap := f.rport
	if f.echo() {
		ap = f.gport
	}
	return f.proto == k.proto && (f.kind&kindV6 != 0) == k.v6 && f.gport == k.bp && ap == k.ap && f.global == k.b && f.remote == k.a
}

const (
	pageBits = 12
	pageSize = 1 << pageBits
	// maxProbe bounds a lock-free scan of the index, which entries may
	// move through while it runs.
	maxProbe = 64
	// maxRetries bounds the restarts of a lookup whose copy was torn.
	maxRetries = 4
)

// table is the connection-tracking table: the slab and the hash index.
// Lookups take no lock; everything that links, unlinks or allocates runs
// under Engine.mu.
//
// The index is a linear-probing array of 8-byte entries, eight to a cache
// line: the top 32 bits of the key's hash, then its node (flow index << 1 |
// dir); 0 is empty. A key's home slot is the top bits of its hash, so an
// entry carries its own home and a deletion can shift the entries after it
// back (Knuth's Algorithm R) without reading their flows, and so a miss
// usually costs one cache line and no flow. At most two entries per flow in
// at least four times as many slots keep the load at or under one half.
type table struct {
	seed  uint64
	pages []*[pageSize]flow // fixed length; a page is set before any of its flows is linked
	index []atomic.Uint64   // outside the Go heap where the OS allows (newIndex)
	mask  uint64
	shift uint // home slot = hash >> shift
	// unmap releases index; New arranges for it to run once the engine is
	// unreachable.
	unmap func()

	// Under Engine.mu.
	used uint32 // slab slots handed out; slot 0 is never used
	free uint32 // head of the free list, chained through created
	max  uint32
}

func newTable(maxFlows int, seed uint64) (table, error) {
	n := bits.Len64(uint64(4*maxFlows - 1))
	index, unmap, err := newIndex(1 << n)
	if err != nil {
		return table{}, fmt.Errorf("natengine: the index of %d flows (%d MiB): %w", maxFlows, 8<<n>>20, err)
	}
	return table{
		seed:  seed,
		pages: make([]*[pageSize]flow, (maxFlows+1+pageSize-1)/pageSize),
		index: index,
		mask:  1<<n - 1,
		shift: uint(64 - n),
		unmap: unmap,
		max:   uint32(maxFlows),
	}, nil
}

func (t *table) flow(i uint32) *flow { return &t.pages[i>>pageBits][i&(pageSize-1)] }

// hash mixes a key with the table's random seed, so that remote peers
// cannot aim their tuples at one slot.
func (t *table) hash(k *key) uint64 {
	if k.v6 {
		return t.hash6(k)
	}
	return t.hash4(k)
}

// hash4 is hash for an IPv4 key, whose addresses fill the first 4 bytes of
// a and b.
func (t *table) hash4(k *key) uint64 {
	a := uint64(binary.LittleEndian.Uint32(k.a[:]))<<32 | uint64(binary.LittleEndian.Uint32(k.b[:]))
	return mix(mix(t.seed^a, hashP0)^k.extra(), hashP2)
}

// hash6 is hash for an IPv6 key.
func (t *table) hash6(k *key) uint64 {
	h := mix(t.seed^binary.LittleEndian.Uint64(k.a[:8]), binary.LittleEndian.Uint64(k.a[8:])^hashP0)
	h = mix(h^binary.LittleEndian.Uint64(k.b[:8]), binary.LittleEndian.Uint64(k.b[8:])^hashP1)
	return mix(h^(k.extra()|1<<48), hashP2)
}

const (
	hashP0 = 0xa0761d6478bd642f
	hashP1 = 0xe7037ed1a0b428db
	hashP2 = 0x8ebc6af09c88c6e3
)

// extra is what a key holds besides its addresses, as one word.
func (k *key) extra() uint64 { return uint64(k.ap)<<32 | uint64(k.bp)<<16 | uint64(k.proto) }

func mix(a, b uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	return hi ^ lo
}

// tagMask selects the hash half of an index entry.
const tagMask = 0xffffffff << 32

// view is a consistent copy of a linked flow, taken without a lock.
type view struct {
	mapping
	idx   uint32
	dir   uint32 // which of the flow's keys matched
	seq   uint32
	st    uint32 // the state word as read
	proto uint8
	kind  uint8
}

// lookup copies the flow with key k into v and reports whether there is
// one. It takes no lock, so a flow linked, unlinked or moved in the index
// meanwhile may be missed; a caller that must not miss one repeats the
// search with find under Engine.mu.
//
// The race detector is told to look away: the plain reads here race with
// the writes of a slot being reused, by design, and the sequence check
// discards what they read then.
//
//go:norace
func (t *table) lookup(k *key, v *view) bool {
	// hash, matches and flow are spelt out for the compiler to inline.
	var h uint64
	if k.v6 {
		h = t.hash6(k)
	} else {
		h = t.hash4(k)
	}
	tag := h & tagMask
	index, mask, pages := t.index, t.mask, t.pages
	for range maxRetries {
		torn := false
		for i, n := h>>t.shift, 0; n < maxProbe; i, n = (i+1)&mask, n+1 {
			e := index[i].Load()
			if e == 0 {
				break
			}
			if e&tagMask != tag {
				continue
			}
			node := uint32(e)
			f := &pages[node>>(pageBits+1)][node>>1&(pageSize-1)]
			w := f.state.Load()
			if w>>32&1 == 0 {
				continue
			}
			if node&1 == dirEgress && !f.matchesEgress(k) || node&1 != dirEgress && !f.matchesIngress(k) {
				continue
			}
			v.local, v.global, v.lport, v.gport = f.local, f.global, f.lport, f.gport
			v.proto, v.kind = f.proto, f.kind
			if f.state.Load()>>32 != w>>32 {
				torn = true
				break
			}
			v.idx, v.dir, v.seq, v.st = node>>1, node&1, uint32(w>>32), uint32(w)
			runtime.KeepAlive(t) // and with it the engine, whose cleanup unmaps index
			return true
		}
		if !torn {
			break
		}
	}
	runtime.KeepAlive(t)
	return false
}

// find is lookup for a holder of Engine.mu, under which the index does not
// change. It returns the flow index and direction, or 0.
func (t *table) find(k *key) (uint32, uint32) {
	h := t.hash(k)
	tag := h & tagMask
	for i := h >> t.shift; ; i = (i + 1) & t.mask {
		e := t.index[i].Load()
		if e == 0 {
			return 0, 0
		}
		if node := uint32(e); e&tagMask == tag && t.flow(node>>1).matches(node&1, k) {
			return node >> 1, node & 1
		}
	}
}

// has reports whether a flow has key k. Under Engine.mu.
func (t *table) has(k *key) bool {
	i, _ := t.find(k)
	return i != 0
}

// alloc returns a free slot, or 0 when the slab is at its maximum. Under
// Engine.mu.
func (t *table) alloc() uint32 {
	if i := t.free; i != 0 {
		t.free = t.flow(i).created
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

// link makes flow i, its fields written, findable by both its keys, with
// state word st. Under Engine.mu.
func (t *table) link(i uint32, st uint32) {
	f := t.flow(i)
	f.state.Store(uint64(f.seq()+1)<<32 | uint64(st))
	for dir := uint32(0); dir < 2; dir++ {
		k := f.key(dir)
		h := t.hash(&k)
		s := h >> t.shift
		for t.index[s].Load() != 0 {
			s = (s + 1) & t.mask
		}
		t.index[s].Store(h&tagMask | uint64(i<<1|dir))
	}
}

// unlink removes both keys of flow i and returns its slot to the free list.
// Under Engine.mu. A lookup still reading the slot sees its sequence number
// move and discards what it read.
func (t *table) unlink(i uint32) {
	f := t.flow(i)
	for dir := uint32(0); dir < 2; dir++ {
		k := f.key(dir)
		s := t.hash(&k) >> t.shift
		for node := uint64(i<<1 | dir); t.index[s].Load()&^tagMask != node; {
			s = (s + 1) & t.mask
		}
		t.erase(s)
	}
	f.state.Store(uint64(f.seq()+1) << 32)
	f.created = t.free
	t.free = i
}

// erase empties index slot s and closes the gap: each entry after it in
// the run that would no longer be found from its home moves back into the
// hole. An entry is written at its new place before its old one is
// cleared, so a concurrent lookup may miss it but never finds a wrong one.
func (t *table) erase(s uint64) {
	for j := s; ; {
		j = (j + 1) & t.mask
		e := t.index[j].Load()
		if e == 0 {
			t.index[s].Store(0)
			return
		}
		// The entry stays when its home lies cyclically in (s, j].
		if home := e >> t.shift; (j-home)&t.mask < (j-s)&t.mask {
			continue
		}
		t.index[s].Store(e)
		s = j
	}
}
