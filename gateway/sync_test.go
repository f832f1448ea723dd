package gateway

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http/httptest"
	"net/netip"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/snorkel-net/snorkel/natengine"
	"github.com/snorkel-net/snorkel/packet"
)

// syncSettle bounds a wait for the sync to catch up: far beyond the normal
// milliseconds on a loaded machine, never what is tested.
const syncSettle = 60 * time.Second

var syncKey = []byte("sync test clusterset pre-shared key")

// quiet keeps the sync's connection logs out of test and benchmark output.
var quiet = slog.New(slog.DiscardHandler)

func syncEngine(t testing.TB) *natengine.Engine {
	t.Helper()
	e, err := natengine.New(natengine.Config{MaxFlows: 1 << 16})
	if err != nil {
		t.Fatal(err)
	}
	err = e.SetRules(natengine.Rules{
		Local:         []netip.Prefix{netip.MustParsePrefix("10.0.0.0/16")},
		Global:        netip.MustParsePrefix("242.1.0.0/16"),
		Remotes:       []netip.Prefix{netip.MustParsePrefix("242.2.0.0/16")},
		ClusterEgress: []netip.Addr{netip.MustParseAddr("242.1.0.1")},
	})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// udp4 builds an IPv4/UDP packet with valid checksums.
func udp4(src, dst netip.Addr, sport, dport uint16) []byte {
	b := make([]byte, 20+8+4)
	b[0] = 0x45
	binary.BigEndian.PutUint16(b[2:], uint16(len(b)))
	b[8], b[9] = 64, packet.ProtoUDP
	copy(b[12:16], src.AsSlice())
	copy(b[16:20], dst.AsSlice())
	binary.BigEndian.PutUint16(b[10:], ^packet.Checksum(b[:20], 0))
	u := b[20:]
	binary.BigEndian.PutUint16(u[0:], sport)
	binary.BigEndian.PutUint16(u[2:], dport)
	binary.BigEndian.PutUint16(u[4:], uint16(len(u)))
	binary.BigEndian.PutUint16(u[6:], ^packet.Checksum(u, packet.PseudoHeaderChecksum(packet.ProtoUDP, src.AsSlice(), dst.AsSlice(), len(u))))
	return b
}

// newFlows starts n UDP flows on e from 10.0.0.7, local ports first,
// first+1, ...
func newFlows(t testing.TB, e *natengine.Engine, first, n int) {
	t.Helper()
	newFlowsFrom(t, e, netip.MustParseAddr("10.0.0.7"), first, n)
}

// newFlowsFrom is newFlows from pod src.
func newFlowsFrom(t testing.TB, e *natengine.Engine, src netip.Addr, first, n int) {
	t.Helper()
	dst := netip.MustParseAddr("242.2.0.9")
	for i := range n {
		b := udp4(src, dst, uint16(first+i), 53)
		var p packet.Parsed
		if r := p.Decode(b); r != packet.DropNone {
			t.Fatalf("test packet: %v", r)
		}
		if !e.Egress(0, b, &p) {
			t.Fatalf("flow %d dropped: %+v", i, e.Stats().Drops)
		}
	}
}

// freeTCPAddr returns a loopback address whose TCP port is free now.
func freeTCPAddr(t testing.TB) netip.AddrPort {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return netip.MustParseAddrPort(ln.Addr().String())
}

func serveSync(t testing.TB, e *natengine.Engine, mod func(*SyncSpec)) (*syncServer, func()) {
	t.Helper()
	s := SyncSpec{Listen: freeTCPAddr(t), Key: syncKey}
	if mod != nil {
		mod(&s)
	}
	var errs errList
	s.check(&errs, true)
	if err := errs.err(); err != nil {
		t.Fatal(err)
	}
	closed := make(chan struct{})
	srv, err := startSyncServer(s, e, quiet, closed)
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			close(closed)
			srv.close()
		}
	}
	t.Cleanup(stop)
	return srv, stop
}

func follow(t testing.TB, srv *syncServer, key []byte) *Follower {
	t.Helper()
	f, err := NewFollower(SyncSpec{Follow: netip.MustParseAddrPort(srv.Addr().String()), Key: key}, 0, quiet)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Stop)
	return f
}

// waitFor polls ok until it holds, failing after syncSettle.
func waitFor(t testing.TB, what string, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(syncSettle); !ok(); {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, syncSettle)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestSyncFollowerGetsTheTableThenItsChanges(t *testing.T) {
	e := syncEngine(t)
	newFlows(t, e, 1000, 3)
	srv, _ := serveSync(t, e, nil)
	f := follow(t, srv, syncKey)
	waitFor(t, "the dump reaches the replica", func() bool { return f.Status().Replica == 3 })
	newFlows(t, e, 2000, 2)
	waitFor(t, "new flows reach the replica", func() bool { return f.Status().Replica == 5 })
	st := f.Status()
	if !st.Connected || st.Role != "passive" || st.RecordsReceived < 5 || st.LastLagSeconds <= 0 {
		t.Errorf("follower status %+v; want connected, passive, at least 5 records and a lag", st)
	}
	if a := srv.c.status("active"); !a.Connected || a.RecordsSent < 5 || a.Resyncs != 1 {
		t.Errorf("server status %+v; want connected, at least 5 records sent, one dump", a)
	}

	// The replica imported into a fresh engine gives the same flows.
	b := syncEngine(t)
	if taken, skipped := b.Import(f.records()); taken != 5 || skipped != 0 {
		t.Fatalf("Import took %d and skipped %d, want 5 and 0", taken, skipped)
	}
}

// rawClient performs the client's hello and returns the connection and
// both nonces.
func rawClient(t *testing.T, srv *syncServer) (net.Conn, [syncNonceLen]byte, [syncNonceLen]byte) {
	t.Helper()
	conn, err := net.Dial("tcp", srv.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	conn.SetDeadline(time.Now().Add(syncSettle))
	ours, theirs, err := syncHello(conn)
	if err != nil {
		t.Fatal(err)
	}
	return conn, ours, theirs
}

// expectClosed checks that the server sends nothing on conn and closes it.
func expectClosed(t *testing.T, conn net.Conn, why string) {
	t.Helper()
	n, err := io.Copy(io.Discard, conn)
	if n != 0 || err != nil {
		t.Errorf("%s: server sent %d bytes (err %v), want it to close the connection at once", why, n, err)
	}
}

func TestSyncServerRefusesAWrongKey(t *testing.T) {
	e := syncEngine(t)
	newFlows(t, e, 1000, 3)
	srv, _ := serveSync(t, e, nil)
	conn, ours, theirs := rawClient(t, srv)
	toServer, _ := syncKeys([]byte("not the clusterset pre-shared key"), ours, theirs)
	w := newFrameWriter(conn, toServer)
	w.write(frameAuth, nil)
	w.Flush()
	expectClosed(t, conn, "a client with the wrong key")
	if st := srv.c.status("active"); st.RecordsSent != 0 || st.Connected {
		t.Errorf("server status %+v after a wrong key; want nothing sent", st)
	}
}

func TestSyncServerRefusesAReplayedAuthFrame(t *testing.T) {
	e := syncEngine(t)
	srv, _ := serveSync(t, e, nil)
	// A real client's proof of the key, recorded.
	conn, ours, theirs := rawClient(t, srv)
	toServer, _ := syncKeys(syncKey, ours, theirs)
	var rec bytes.Buffer
	w := newFrameWriter(io.MultiWriter(conn, &rec), toServer)
	w.write(frameAuth, nil)
	w.Flush()
	// Replayed on a new connection, whose nonces differ, it proves nothing.
	conn2, _, _ := rawClient(t, srv)
	conn2.Write(rec.Bytes())
	expectClosed(t, conn2, "a replayed auth frame")
}

func TestFrameReaderRefusesReplayedAndForeignFrames(t *testing.T) {
	var a, b [syncNonceLen]byte
	a[0], b[0] = 1, 2
	key, _ := syncKeys(syncKey, a, b)
	var wire bytes.Buffer
	w := newFrameWriter(&wire, key)
	w.write(frameRecords, []byte("12345678"))
	w.Flush()
	first := bytes.Clone(wire.Bytes())

	for _, tt := range []struct {
		name  string
		input []byte
		want  error
	}{
		{"a frame read twice is refused the second time", append(bytes.Clone(first), first...), errSyncAuth},
		{"a frame with a flipped payload bit is refused", func() []byte {
			x := bytes.Clone(first)
			x[syncHeaderLen] ^= 1
			return append(first[:0:0], x...)
		}(), errSyncAuth},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := newFrameReader(bytes.NewReader(tt.input), key)
			var err error
			for err == nil {
				_, _, err = r.read()
			}
			if !errors.Is(err, tt.want) {
				t.Errorf("read: %v, want %v", err, tt.want)
			}
		})
	}
	t.Run("a frame of another connection's keys is refused", func(t *testing.T) {
		b[0] = 3
		other, _ := syncKeys(syncKey, a, b)
		if _, _, err := newFrameReader(bytes.NewReader(first), other).read(); !errors.Is(err, errSyncAuth) {
			t.Errorf("read: %v, want %v", err, errSyncAuth)
		}
	})
	t.Run("the direction's other key refuses it", func(t *testing.T) {
		_, back := syncKeys(syncKey, a, b)
		if _, _, err := newFrameReader(bytes.NewReader(first), back).read(); !errors.Is(err, errSyncAuth) {
			t.Errorf("read: %v, want %v", err, errSyncAuth)
		}
	})
}

func TestSyncFollowerReconnectsAndResyncsWhenTheActiveChanges(t *testing.T) {
	e1 := syncEngine(t)
	newFlows(t, e1, 1000, 3)
	srv1, stop1 := serveSync(t, e1, nil)
	f := follow(t, srv1, syncKey)
	waitFor(t, "the first active's flows reach the replica", func() bool { return f.Status().Replica == 3 })

	// The active restarts at the same address with other flows.
	stop1()
	e2 := syncEngine(t)
	newFlows(t, e2, 5000, 2)
	serveSync(t, e2, func(s *SyncSpec) { s.Listen = netip.MustParseAddrPort(srv1.Addr().String()) })
	waitFor(t, "the replica follows the new active's table", func() bool {
		st := f.Status()
		return st.Connected && st.Resyncs == 2 && st.Replica == 2
	})
	b := syncEngine(t)
	if taken, _ := b.Import(f.records()); taken != 2 {
		t.Fatalf("Import took %d, want the new active's 2 flows", taken)
	}
}

func TestSyncResyncsAfterTheJournalOverflows(t *testing.T) {
	e := syncEngine(t)
	// A slow sender and a small queue: a burst of new flows overflows it.
	srv, _ := serveSync(t, e, func(s *SyncSpec) { s.Rate, s.Queue = 200, 4 })
	f := follow(t, srv, syncKey)
	waitFor(t, "the follower connects", func() bool { return f.Status().Connected })
	newFlows(t, e, 1000, 100)
	waitFor(t, "the replica catches up through a resync", func() bool { return f.Status().Replica == 100 })
	if st := srv.c.status("active"); st.Overflows == 0 || st.Resyncs < 2 {
		t.Errorf("server status %+v; want an overflow and a second dump", st)
	}
}

func TestSyncSpecErrorsNameTheFieldAndTheFix(t *testing.T) {
	ap := netip.MustParseAddrPort
	for _, tt := range []struct {
		name string
		s    SyncSpec
		gn   bool
		want string
	}{
		{"both ends", SyncSpec{Listen: ap("10.0.0.1:4491"), Follow: ap("10.0.0.2:4491"), Key: syncKey}, true, "sync.follow"},
		{"neither end", SyncSpec{Key: syncKey}, true, "sync.listen"},
		{"listen without Globalnet", SyncSpec{Listen: ap("10.0.0.1:4491"), Key: syncKey}, false, "Globalnet is off"},
		{"unspecified follow", SyncSpec{Follow: ap("0.0.0.0:4491"), Key: syncKey}, true, "not a unicast address"},
		{"short key", SyncSpec{Follow: ap("10.0.0.2:4491"), Key: []byte("short")}, true, "sync.key"},
		{"negative rate", SyncSpec{Follow: ap("10.0.0.2:4491"), Key: syncKey, Rate: -1}, true, "sync.rate"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var errs errList
			tt.s.check(&errs, tt.gn)
			if err := errs.err(); err == nil || !bytes.Contains([]byte(err.Error()), []byte(tt.want)) {
				t.Errorf("check: %v, want an error naming %q", err, tt.want)
			}
		})
	}
	s := SyncSpec{Listen: netip.MustParseAddrPort("10.0.0.1:0"), Key: syncKey}
	var errs errList
	s.check(&errs, true)
	if s.Listen.Port() != DefaultSyncPort || s.Rate != DefaultSyncRate || s.Queue != DefaultSyncQueue {
		t.Errorf("defaults: %+v", s)
	}
}

func TestPassiveRunnerFollowsAndShowsItsSync(t *testing.T) {
	e := syncEngine(t)
	newFlows(t, e, 1000, 2)
	srv, _ := serveSync(t, e, nil)
	r := NewRunner(quiet)
	defer r.Close()
	passive := mustCompile(t, globalnetConfig())
	passive.Remotes = nil
	passive.Sync = &SyncSpec{Follow: netip.MustParseAddrPort(srv.Addr().String()), Key: syncKey}
	if err := r.Apply(t.Context(), passive); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the passive runner's replica fills", func() bool {
		st, ok := r.SyncStatus()
		return ok && st.Replica == 2
	})
	rec := httptest.NewRecorder()
	r.DebugHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/status", nil))
	var st Stats
	if err := json.Unmarshal(rec.Body.Bytes(), &st); err != nil || st.Sync == nil || st.Sync.Role != "passive" || st.Sync.Replica != 2 || !st.Sync.Connected {
		t.Errorf("passive /status: %d %s (%v); want the sync, passive, connected, 2 flows", rec.Code, rec.Body, err)
	}

	// A spec that neither follows nor starts a gateway ends the follower.
	passive.Sync = nil
	if err := r.Apply(t.Context(), passive); err != nil {
		t.Fatal(err)
	}
	if _, ok := r.SyncStatus(); ok {
		t.Error("the follower outlived a spec without sync")
	}
}

// TestRunnerTakesOverTheFollowedFlows runs a Runner passive, following an
// active gateway's engine, then gives it the active spec: the gateway it
// starts holds the followed flows before it reads a packet, and the
// follower is gone.
func TestRunnerTakesOverTheFollowedFlows(t *testing.T) {
	cfg := globalnetConfig()
	cfg.TUN.Name = "snk-sync0"
	cfg.Transport.WireGuard.PrivateKeyFile = filepath.Join(t.TempDir(), "key")
	d, err := mustCompile(t, cfg).derive()
	if err != nil {
		t.Fatal(err)
	}
	e, err := natengine.New(natengine.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.SetRules(d.globalnet.rules); err != nil {
		t.Fatal(err)
	}
	newFlowsFrom(t, e, netip.MustParseAddr("10.8.3.3"), 1000, 3)
	// Made outside the test's network namespace, as the follower's
	// connections are.
	srv, _ := serveSync(t, e, nil)
	inFreshNetns(t, func() {
		r := NewRunner(quiet)
		defer r.Close()
		passive := mustCompile(t, cfg)
		passive.Remotes = nil
		passive.Sync = &SyncSpec{Follow: netip.MustParseAddrPort(srv.Addr().String()), Key: syncKey}
		if err := r.Apply(t.Context(), passive); err != nil {
			t.Error(err)
			return
		}
		waitFor(t, "the passive runner's replica fills", func() bool {
			st, ok := r.SyncStatus()
			return ok && st.Replica == 3
		})
		if err := r.Apply(t.Context(), mustCompile(t, cfg)); err != nil {
			t.Error(err)
			return
		}
		st, ok := r.Stats()
		if !ok || st.Globalnet == nil || st.Globalnet.NAT == nil || st.Globalnet.NAT.Flows != 3 {
			t.Errorf("the gateway started from the replica: %+v; want the 3 followed flows", st.Globalnet)
		}
		if _, ok := r.SyncStatus(); ok {
			t.Error("the follower outlived the takeover")
		}
	})
}

func TestSyncSectionOfTheFileRoundTrips(t *testing.T) {
	c := globalnetConfig()
	c.Sync = &SyncConfig{Listen: "10.0.0.5", Key: string(syncKey)}
	s, err := c.Compile()
	if err != nil {
		t.Fatal(err)
	}
	if s.Sync.Listen != netip.MustParseAddrPort("10.0.0.5:4491") || s.Sync.Rate != DefaultSyncRate {
		t.Errorf("sync section compiled to %+v; want listen 10.0.0.5:4491 and the defaults", s.Sync)
	}
	back := s.Config()
	again, err := back.Compile()
	if err != nil {
		t.Fatalf("the rendered config does not compile: %v", err)
	}
	if !reflect.DeepEqual(again.Sync, s.Sync) {
		t.Errorf("round trip changed the section:\n got %+v\nwant %+v", again.Sync, s.Sync)
	}
	c.Sync.Listen = "10.0.0.5:port"
	if _, err := c.Compile(); err == nil || !strings.Contains(err.Error(), "sync.listen") {
		t.Errorf("a bad sync.listen compiled: %v", err)
	}
}
