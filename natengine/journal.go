package natengine

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Replication: a cluster's active gateway keeps its standby's copy of the
// table current, as conntrackd does for netfilter, so that the standby
// translates established flows exactly as the active did when it takes
// over. The active engine writes what happens to its flows into a Journal
// (new, changed state word, removed); the gateway sends a Dump of the table
// at connect and after a Journal overflow, then the Journal's records. The
// standby keeps them in a Replica, which its rules (none while it is
// passive) do not touch, and Imports the Replica when it becomes active.

// Op is what happened to a flow.
type Op uint8

// Ops of a Record.
const (
	// OpNew: a flow was created (or is listed by Dump).
	OpNew Op = iota + 1
	// OpChange: a flow's state word changed: its TCP state, a FIN, its
	// first reply. Each changes its timeout or how the next packet moves it.
	OpChange
	// OpRemove: a flow expired, was evicted or was retired.
	OpRemove
)

// Record is one flow as replication carries it: its exact translation, its
// state word and its age. Ages, not times: two engines' clocks have
// different epochs. It is pointer-free, so a Journal of them costs the
// garbage collector nothing.
type Record struct {
	Op      Op
	Proto   uint8
	V6      bool
	Inbound bool // started by Ingress through an ingress rule
	Echo    bool // ICMP echo: the ports hold the identifier
	// State is the engine's state word: the FlowState in the low four
	// bits, then what has been seen (state.go).
	State uint32
	// Age is the flow's age in seconds.
	Age                   uint32
	Local, Global, Remote [16]byte // IPv4 in the first four bytes
	LPort, GPort, RPort   uint16
}

// FlowState returns the record's FlowState.
func (r *Record) FlowState() FlowState { return FlowState(r.State & stateMask) }

// record returns the record of flow f with state word st at second now.
// The caller makes sure f is not rewritten meanwhile (Engine.mu) or checks
// its sequence number afterwards.
//
//go:norace
func (f *flow) record(op Op, st, now uint32) Record {
	return Record{
		Op: op, Proto: f.proto, V6: f.kind&kindV6 != 0, Inbound: f.kind&kindInbound != 0, Echo: f.echo(),
		State: st, Age: now - f.created,
		Local: f.local, Global: f.global, Remote: f.remote,
		LPort: f.lport, GPort: f.gport, RPort: f.rport,
	}
}

// Journal is a bounded queue of the Records an engine writes while it is
// attached (Engine.SetJournal). When the consumer falls more than its
// capacity behind, records are dropped and the next Drain says so: the
// consumer's copy is then incomplete and needs a Dump. Safe for
// concurrent use; put allocates nothing.
type Journal struct {
	mu       sync.Mutex
	buf      []Record
	at       []int64 // when each record was written, by now
	now      func() int64
	head, n  int
	lost     bool // records were dropped since the last Drain
	ready    chan struct{}
	overflow atomic.Uint64
}

// NewJournal returns a journal that holds up to capacity records, each
// stamped with now (nanoseconds; default the wall clock) when written, so
// that a consumer can tell how far behind it runs. Records are written per
// flow event, not per packet.
func NewJournal(capacity int, now func() int64) (*Journal, error) {
	if capacity < 1 {
		return nil, fmt.Errorf("natengine: journal capacity %d is out of range; use at least 1", capacity)
	}
	if now == nil {
		now = func() int64 { return time.Now().UnixNano() }
	}
	return &Journal{buf: make([]Record, capacity), at: make([]int64, capacity), now: now, ready: make(chan struct{}, 1)}, nil
}

func (j *Journal) put(r *Record) {
	j.mu.Lock()
	if j.n == len(j.buf) {
		if !j.lost {
			j.lost = true
			j.overflow.Add(1)
		}
	} else {
		i := (j.head + j.n) % len(j.buf)
		j.buf[i], j.at[i] = *r, j.now()
		j.n++
	}
	j.mu.Unlock()
	select {
	case j.ready <- struct{}{}:
	default:
	}
}

// Ready is signalled after a put; the consumer then Drains until it
// returns nothing.
func (j *Journal) Ready() <-chan struct{} { return j.ready }

// Drain moves up to len(dst) records, oldest first, into dst, and their
// stamps into at unless it is nil (else at least as long as dst), and
// returns how many. lost reports that records were dropped since the last Drain:
// the journal is then emptied, and the consumer must Dump the table again
// (the journal keeps recording meanwhile, so nothing after this call is
// missed).
func (j *Journal) Drain(dst []Record, at []int64) (n int, lost bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.lost {
		j.lost, j.head, j.n = false, 0, 0
		return 0, true
	}
	for n < len(dst) && j.n > 0 {
		dst[n] = j.buf[j.head]
		if at != nil {
			at[n] = j.at[j.head]
		}
		j.head = (j.head + 1) % len(j.buf)
		j.n--
		n++
	}
	return n, false
}

// Reset empties the journal: the consumer is about to Dump the table,
// which covers everything recorded so far.
func (j *Journal) Reset() {
	j.mu.Lock()
	j.lost, j.head, j.n = false, 0, 0
	j.mu.Unlock()
}

// Len returns the number of records waiting.
func (j *Journal) Len() int {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.n
}

// Overflows returns how many times the journal filled up and dropped
// records.
func (j *Journal) Overflows() uint64 { return j.overflow.Load() }

// SetJournal attaches j (nil detaches): from then on the engine writes
// every flow created, every change of a flow's state word and every flow
// removed into it. Without a journal the cost is one atomic load per
// event.
func (e *Engine) SetJournal(j *Journal) { e.journal.Store(j) }

// note writes what happened to flow f, with state word st, into the
// journal. Under Engine.mu.
func (e *Engine) note(op Op, f *flow, st uint32) {
	if j := e.journal.Load(); j != nil {
		r := f.record(op, st, e.clock())
		j.put(&r)
	}
}

// noteChange writes the new state word st of the flow v was copied from,
// read without Engine.mu: a record of a flow removed meanwhile is dropped.
func (e *Engine) noteChange(v *view, st, now uint32) {
	j := e.journal.Load()
	if j == nil {
		return
	}
	f := e.t.flow(v.idx)
	r := f.record(OpChange, st, now)
	if f.seq() != v.seq {
		return
	}
	j.put(&r)
}

// dumpChunk is how many slots Dump examines per hold of Engine.mu.
const dumpChunk = 1024

// Dump calls fn with the live flows as OpNew records, up to len(buf) at a
// time in buf. It holds Engine.mu only while it copies, never while fn
// runs, so fn may take its time (pace a send); flows created or removed
// meanwhile are in the journal, if one is attached. It stops early when fn
// returns false.
func (e *Engine) Dump(buf []Record, fn func([]Record) bool) {
	if len(buf) == 0 {
		return
	}
	for start := uint32(1); ; {
		n := 0
		e.mu.Lock()
		now := e.clock()
		end := min(start+dumpChunk, e.t.used+1)
		for ; start < end && n < len(buf); start++ {
			if f := e.t.flow(start); f.linked() {
				buf[n] = f.record(OpNew, f.st(), now)
				n++
			}
		}
		done := start > e.t.used
		e.mu.Unlock()
		if n > 0 && !fn(buf[:n]) || done {
			return
		}
	}
}
