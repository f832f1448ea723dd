package gateway

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/snorkel-net/snorkel/natengine"
)

// Connection-tracking sync between a cluster's two gateways, as conntrackd
// does for netfilter. The active gateway's NAT engine writes its flow
// events into a bounded journal; a syncServer sends a paced dump of the
// table when the passive gateway connects (and again whenever the journal
// overflowed), then the journal's records, at most SyncSpec.Rate a
// second. The passive gateway's Follower keeps them in a replica bounded by
// the table's size, reconnecting with backoff; the gateway that starts
// from it (Options.Takeover) imports it before it translates a packet.
// Flows created in the moments before the active dies, before their
// records left, are lost.
const (
	// syncBeat is how often an idle server says it is alive; a follower
	// that hears nothing for syncDeadBeats beats reconnects.
	syncBeat      = time.Second
	syncDeadBeats = 5
	// syncBatch is the most records per frame.
	syncBatch = 256
	// syncBackoffMax caps the follower's wait between connection attempts.
	syncBackoffMin = 100 * time.Millisecond
	syncBackoffMax = 5 * time.Second
)

// SyncStatus is the sync's part of /status.
type SyncStatus struct {
	// Role is "active" (serving) or "passive" (following).
	Role string `json:"role"`
	// Peer is the other gateway's address: the follower connected, or the
	// active followed.
	Peer      string `json:"peer,omitempty"`
	Connected bool   `json:"connected"`
	// Replica is the flows the passive gateway holds.
	Replica int `json:"replica"`
	// LastLag is the time from a flow event on the active to its record
	// arriving on the passive, for the last record that came from the
	// journal (by the two nodes' clocks).
	LastLagSeconds  float64 `json:"lastLagSeconds"`
	RecordsSent     uint64  `json:"recordsSent"`
	RecordsReceived uint64  `json:"recordsReceived"`
	Resyncs         uint64  `json:"resyncs"`
	Overflows       uint64  `json:"journalOverflows"`
}

// syncCounters are a sync end's counters.
type syncCounters struct {
	sent, received, resyncs, overflows atomic.Uint64
	lag                                atomic.Int64
	connected                          atomic.Bool
	peer                               atomic.Pointer[string]
}

func (c *syncCounters) status(role string) SyncStatus {
	st := SyncStatus{
		Role: role, Connected: c.connected.Load(), LastLagSeconds: time.Duration(c.lag.Load()).Seconds(),
		RecordsSent: c.sent.Load(), RecordsReceived: c.received.Load(), Resyncs: c.resyncs.Load(), Overflows: c.overflows.Load(),
	}
	if p := c.peer.Load(); p != nil {
		st.Peer = *p
	}
	return st
}

// syncServer serves the active gateway's flows to one follower at a time.
type syncServer struct {
	spec SyncSpec
	e    *natengine.Engine
	j    *natengine.Journal
	ln   net.Listener
	log  *slog.Logger
	c    syncCounters

	mu   sync.Mutex
	sess net.Conn      // the connection being served
	turn chan struct{} // held (full) while a session uses the journal
	wg   sync.WaitGroup
}

// startSyncServer attaches a journal to e and serves it on s.Listen until
// closed is closed.
func startSyncServer(s SyncSpec, e *natengine.Engine, log *slog.Logger, closed <-chan struct{}) (*syncServer, error) {
	j, err := natengine.NewJournal(s.Queue, nil)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", s.Listen.String())
	if err != nil {
		return nil, fmt.Errorf("sync: listen on sync.listen %s: %w", s.Listen, err)
	}
	srv := &syncServer{spec: s, e: e, j: j, ln: ln, log: log, turn: make(chan struct{}, 1)}
	e.SetJournal(j)
	srv.wg.Add(1)
	go srv.accept()
	go func() {
		<-closed
		srv.close()
	}()
	return srv, nil
}

// Addr is where the server listens.
func (s *syncServer) Addr() net.Addr { return s.ln.Addr() }

func (s *syncServer) close() {
	s.ln.Close()
	s.mu.Lock()
	if s.sess != nil {
		s.sess.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	s.e.SetJournal(nil)
}

func (s *syncServer) accept() {
	defer s.wg.Done()
	for {
		conn, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer conn.Close()
			if err := s.serve(conn); err != nil && !errors.Is(err, net.ErrClosed) {
				s.log.Warn("sync: follower connection ended", "peer", conn.RemoteAddr(), "err", err)
			}
		}()
	}
}

// serve runs one follower's connection: hello, its proof of the key, then
// a dump and the journal. A newer follower's connection replaces it.
func (s *syncServer) serve(conn net.Conn) error {
	conn.SetDeadline(time.Now().Add(syncDeadBeats * syncBeat))
	ours, theirs, err := syncHello(conn)
	if err != nil {
		return err
	}
	toServer, toClient := syncKeys(s.spec.Key, theirs, ours)
	r := newFrameReader(conn, toServer)
	typ, _, err := r.read()
	if err == nil && typ != frameAuth {
		err = errSyncAuth
	}
	if err != nil {
		return fmt.Errorf("sync: the follower did not prove the key: %w", err)
	}
	conn.SetDeadline(time.Time{})
	s.mu.Lock()
	if s.sess != nil {
		s.sess.Close()
	}
	s.sess = conn
	s.mu.Unlock()
	s.turn <- struct{}{}
	defer func() { <-s.turn }()
	peer := conn.RemoteAddr().String()
	s.c.peer.Store(&peer)
	s.c.connected.Store(true)
	defer s.c.connected.Store(false)
	s.log.Info("sync: follower connected", "peer", peer)
	// The follower sends nothing more; a read that ends tells us it left
	// or the connection was closed.
	gone := make(chan struct{})
	go func() {
		r.read()
		conn.Close()
		close(gone)
	}()
	return s.send(newFrameWriter(conn, toClient), gone)
}

// send runs the dump and the journal to w until the connection fails or
// gone is closed.
func (s *syncServer) send(w *frameWriter, gone <-chan struct{}) error {
	p := newPacer(s.spec.Rate)
	recs := make([]natengine.Record, syncBatch)
	at := make([]int64, syncBatch)
	var payload []byte
	frame := func(recs []natengine.Record, stamp int64) error {
		p.wait(len(recs))
		payload = binary.BigEndian.AppendUint64(payload[:0], uint64(stamp))
		for i := range recs {
			payload = natengine.AppendRecord(payload, &recs[i])
		}
		s.c.sent.Add(uint64(len(recs)))
		return w.write(frameRecords, payload)
	}
	resync := func() error {
		s.c.resyncs.Add(1)
		s.j.Reset()
		if err := w.write(frameBegin, nil); err != nil {
			return err
		}
		var err error
		s.e.Dump(recs, func(b []natengine.Record) bool {
			err = frame(b, 0)
			return err == nil
		})
		if err != nil {
			return err
		}
		if err := w.write(frameEnd, nil); err != nil {
			return err
		}
		return w.Flush()
	}
	if err := resync(); err != nil {
		return err
	}
	beat := time.NewTicker(syncBeat)
	defer beat.Stop()
	for {
		n, lost := s.j.Drain(recs, at)
		switch {
		case lost:
			s.c.overflows.Add(1)
			s.log.Warn("sync: the journal overflowed; sending the whole table again", "queue", s.spec.Queue)
			if err := resync(); err != nil {
				return err
			}
			continue
		case n > 0:
			if err := frame(recs[:n], at[0]); err != nil {
				return err
			}
			continue
		}
		if err := w.Flush(); err != nil {
			return err
		}
		select {
		case <-gone:
			return net.ErrClosed
		case <-s.j.Ready():
		case <-beat.C:
			if err := w.write(frameBeat, nil); err != nil {
				return err
			}
		}
	}
}

// pacer spreads sends to at most rate records a second.
type pacer struct {
	rate float64
	next time.Time // when the records sent so far are paid for
}

func newPacer(rate int) *pacer { return &pacer{rate: float64(rate), next: time.Now()} }

// wait blocks until n more records may go. It lets a burst of up to a
// tenth of a second's worth through at once.
func (p *pacer) wait(n int) {
	now := time.Now()
	if p.next.Before(now.Add(-100 * time.Millisecond)) {
		p.next = now.Add(-100 * time.Millisecond)
	}
	p.next = p.next.Add(time.Duration(float64(n) / p.rate * float64(time.Second)))
	if d := p.next.Sub(now); d > 0 {
		time.Sleep(d)
	}
}

// Follower is the passive gateway's side of the sync: it follows the
// active gateway's address, keeps the replica of its flows, and hands it
// to the gateway that takes over (Options.Takeover).
type Follower struct {
	spec SyncSpec
	log  *slog.Logger
	c    syncCounters
	// onLag, when set (tests), sees every lag measured.
	onLag func(time.Duration)

	mu      sync.Mutex
	replica *natengine.Replica
	resync  bool // a resync is under way

	cancel context.CancelFunc
	done   chan struct{}
}

// NewFollower starts following s.Follow, keeping at most maxFlows flows (0:
// the NAT engine's default).
func NewFollower(s SyncSpec, maxFlows int, log *slog.Logger) (*Follower, error) {
	var errs errList
	s.check(&errs, true)
	if err := errs.err(); err != nil {
		return nil, err
	}
	if !s.Follow.IsValid() {
		return nil, errors.New("gateway: sync.follow is not set; a follower needs the active gateway's sync address")
	}
	if maxFlows <= 0 {
		maxFlows = natengine.DefaultMaxFlows
	}
	if log == nil {
		log = slog.Default()
	}
	ctx, cancel := context.WithCancel(context.Background())
	f := &Follower{spec: s, log: log, replica: natengine.NewReplica(maxFlows), cancel: cancel, done: make(chan struct{})}
	peer := s.Follow.String()
	f.c.peer.Store(&peer)
	go f.run(ctx)
	return f, nil
}

// Follows returns the address followed.
func (f *Follower) Follows() netip.AddrPort { return f.spec.Follow }

// Stop ends the following; the replica stays for Takeover.
func (f *Follower) Stop() {
	f.cancel()
	<-f.done
}

// Status is the follower's part of /status.
func (f *Follower) Status() SyncStatus {
	st := f.c.status("passive")
	f.mu.Lock()
	st.Replica = f.replica.Len()
	f.mu.Unlock()
	return st
}

// records stops the follower and returns its flows.
func (f *Follower) records() []natengine.Record {
	f.Stop()
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.replica.Records()
}

func (f *Follower) run(ctx context.Context) {
	defer close(f.done)
	backoff := syncBackoffMin
	for {
		start := time.Now()
		err := f.session(ctx)
		f.c.connected.Store(false)
		if ctx.Err() != nil {
			return
		}
		if time.Since(start) > syncDeadBeats*syncBeat {
			backoff = syncBackoffMin
		}
		f.log.Warn("sync: lost the active gateway; reconnecting", "active", f.spec.Follow, "err", err, "in", backoff)
		// Jitter keeps a restarted pair of followers from knocking in step.
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff/2 + rand.N(backoff/2)):
		}
		backoff = min(2*backoff, syncBackoffMax)
	}
}

// session runs one connection to the active gateway.
func (f *Follower) session(ctx context.Context) error {
	d := net.Dialer{Timeout: syncDeadBeats * syncBeat}
	conn, err := d.DialContext(ctx, "tcp", f.spec.Follow.String())
	if err != nil {
		return err
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	conn.SetDeadline(time.Now().Add(syncDeadBeats * syncBeat))
	ours, theirs, err := syncHello(conn)
	if err != nil {
		return err
	}
	toServer, toClient := syncKeys(f.spec.Key, ours, theirs)
	w := newFrameWriter(conn, toServer)
	if err := w.write(frameAuth, nil); err != nil {
		return err
	}
	if err := w.Flush(); err != nil {
		return err
	}
	r := newFrameReader(conn, toClient)
	for {
		conn.SetReadDeadline(time.Now().Add(syncDeadBeats * syncBeat))
		typ, payload, err := r.read()
		if err != nil {
			return err
		}
		f.c.connected.Store(true)
		if err := f.apply(typ, payload); err != nil {
			return err
		}
	}
}

// apply applies one frame to the replica.
func (f *Follower) apply(typ byte, payload []byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch typ {
	case frameBegin:
		f.c.resyncs.Add(1)
		f.resync = true
		f.replica.BeginResync()
	case frameEnd:
		if f.resync {
			f.replica.EndResync()
		}
		f.resync = false
	case frameRecords:
		if len(payload) < 8 {
			return fmt.Errorf("sync: records frame of %d bytes", len(payload))
		}
		stamp := int64(binary.BigEndian.Uint64(payload))
		n := uint64(0)
		for b := payload[8:]; len(b) > 0; n++ {
			r, size, err := natengine.DecodeRecord(b)
			if err != nil {
				return err
			}
			f.replica.Apply(&r)
			b = b[size:]
		}
		f.c.received.Add(n)
		if stamp != 0 {
			lag := time.Duration(time.Now().UnixNano() - stamp)
			f.c.lag.Store(int64(lag))
			if f.onLag != nil {
				f.onLag(lag)
			}
		}
	case frameBeat:
	default:
		return fmt.Errorf("sync: unknown frame type %d", typ)
	}
	return nil
}

// takeOver imports the replica of f, if any, into the NAT engine. It runs
// before the gateway has a device, so before any packet is translated.
func (g *Gateway) takeOver(f *Follower) {
	if f == nil {
		return
	}
	recs := f.records()
	e, ok := g.xlate.(*natengine.Engine)
	if !ok {
		g.log.Warn("sync: no NAT engine to take the replicated flows over", "flows", len(recs))
		return
	}
	taken, skipped := e.Import(recs)
	g.log.Info("sync: took over the active gateway's flows", "taken", taken, "skipped", skipped)
}

// startSync serves the NAT engine's flows when the spec says so.
func (g *Gateway) startSync() error {
	s := g.spec.Sync
	if s == nil || !s.Listen.IsValid() {
		return nil
	}
	e, ok := g.xlate.(*natengine.Engine)
	if !ok {
		return errors.New("sync: sync.listen is set but the gateway runs no NAT engine (Globalnet is off or replaced)")
	}
	srv, err := startSyncServer(*s, e, g.log, g.closed)
	if err != nil {
		return err
	}
	g.sync = srv
	return nil
}
