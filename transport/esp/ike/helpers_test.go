package ike

import (
	"bytes"
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"
)

// settle bounds a real-time wait for something that takes milliseconds on
// an idle machine (an exchange over a socket, a swanctl command): go test
// runs packages in parallel, and on a loaded 2-core machine such waits
// stretch by orders of magnitude. Running out fails the test, so it is far
// beyond the normal time. Most tests here run on testNet's fake clock
// instead.
const settle = 60 * time.Second

var (
	addrA = netip.MustParseAddrPort("192.0.2.1:4500")
	addrB = netip.MustParseAddrPort("192.0.2.2:4500")
	netsA = []netip.Prefix{netip.MustParsePrefix("10.1.0.0/16")}
	netsB = []netip.Prefix{netip.MustParsePrefix("10.2.0.0/16")}
	psk   = []byte("snorkel-test-psk-0123456789abcdef")
)

// fakeDP is a DataPlane that records what the engine installs and deletes.
type fakeDP struct {
	mu       sync.Mutex
	children map[uint32]ChildSA // by inbound SPI
	events   []string           // "install <in>", "delete <in>", in order
	installs []ChildSA
	stats    map[uint32]SAStats
	drops    map[DropReason]int
}

func newFakeDP() *fakeDP {
	return &fakeDP{children: map[uint32]ChildSA{}, stats: map[uint32]SAStats{}}
}

func (d *fakeDP) InstallChild(c ChildSA) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, dup := d.children[c.InSPI]; dup {
		return fmt.Errorf("inbound SPI %08x installed twice", c.InSPI)
	}
	d.children[c.InSPI] = c
	d.installs = append(d.installs, c)
	d.events = append(d.events, fmt.Sprintf("install %08x", c.InSPI))
	return nil
}

func (d *fakeDP) DeleteChild(peer int, inSPI uint32) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.children, inSPI)
	d.events = append(d.events, fmt.Sprintf("delete %08x", inSPI))
}

func (d *fakeDP) Stats(peer int, inSPI uint32) (SAStats, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.children[inSPI]; !ok {
		return SAStats{}, false
	}
	return d.stats[inSPI], true
}

// current returns the installed CHILD_SAs in order of installation.
func (d *fakeDP) current() []ChildSA {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []ChildSA
	for _, c := range d.installs {
		if _, ok := d.children[c.InSPI]; ok {
			out = append(out, c)
		}
	}
	return out
}

func (d *fakeDP) eventLog() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.events)
}

// packet is one IKE message in flight on a testNet.
type packet struct {
	from, to netip.AddrPort
	msg      []byte
}

// testNet connects engines in memory under a virtual clock: messages are
// delivered in order, timers run when the clock reaches them, and drop
// decides which messages are lost.
type testNet struct {
	t       *testing.T
	now     time.Time
	addrs   []netip.AddrPort
	engines []*Engine
	queue   []packet
	sent    []packet
	drop    func(p packet) bool
}

type netSender struct {
	n    *testNet
	self netip.AddrPort
}

func (s netSender) SendIKE(to netip.AddrPort, msg []byte) error {
	p := packet{from: s.self, to: to, msg: bytes.Clone(msg)}
	s.n.queue = append(s.n.queue, p)
	s.n.sent = append(s.n.sent, p)
	return nil
}

func newTestNet(t *testing.T) *testNet {
	return &testNet{t: t, now: time.Unix(1_700_000_000, 0)}
}

// add makes an engine at addr; its log goes to the test log and to logs.
func (n *testNet) add(addr netip.AddrPort, cfg Config, dp DataPlane, logs *bytes.Buffer) *Engine {
	n.t.Helper()
	h := slog.NewTextHandler(&testWriter{t: n.t, prefix: addr.String(), buf: logs}, &slog.HandlerOptions{Level: slog.LevelDebug})
	e, err := NewEngine(cfg, dp, netSender{n: n, self: addr}, slog.New(h))
	if err != nil {
		n.t.Fatal(err)
	}
	n.addrs = append(n.addrs, addr)
	n.engines = append(n.engines, e)
	return e
}

// start starts every engine, as Run does first.
func (n *testNet) start() {
	for _, e := range n.engines {
		e.start(n.now)
	}
}

// run delivers messages and fires timers for d of virtual time.
func (n *testNet) run(d time.Duration) {
	end := n.now.Add(d)
	for {
		for len(n.queue) > 0 {
			p := n.queue[0]
			n.queue = n.queue[1:]
			if n.drop != nil && n.drop(p) {
				continue
			}
			if i := slices.Index(n.addrs, p.to); i >= 0 {
				n.engines[i].handle(p.from, p.msg, n.now)
			}
		}
		next := end
		for _, e := range n.engines {
			if t := e.tick(n.now); t.Before(next) {
				next = t
			}
		}
		if len(n.queue) > 0 {
			continue
		}
		if !next.After(n.now) {
			next = n.now.Add(time.Millisecond)
		}
		if !next.Before(end) {
			n.now = end
			for _, e := range n.engines {
				e.tick(n.now)
			}
			if len(n.queue) == 0 {
				return
			}
			end = end.Add(time.Millisecond)
			continue
		}
		n.now = next
	}
}

// count returns how many messages from went to with the exchange and
// direction given.
func (n *testNet) count(from netip.AddrPort, exchange uint8, response bool) int {
	c := 0
	for _, p := range n.sent {
		if p.from == from && len(p.msg) >= headerLen && p.msg[18] == exchange && (p.msg[19]&flagResponse != 0) == response {
			c++
		}
	}
	return c
}

// testWriter sends log lines to the test log and keeps them in buf.
type testWriter struct {
	t      *testing.T
	prefix string
	buf    *bytes.Buffer
	mu     sync.Mutex
}

func (w *testWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.buf != nil {
		w.buf.Write(b)
	}
	w.t.Logf("%s %s", w.prefix, bytes.TrimRight(b, "\n"))
	return len(b), nil
}

// baseConfig is a configuration for the gateway at self talking to the
// one at peer, A with netsA behind it and B with netsB.
func baseConfig(self netip.AddrPort) Config {
	c := Config{
		PSK:               psk,
		RetransmitTimeout: time.Second,
		RetransmitTries:   5,
		DPDInterval:       30 * time.Second,
	}
	if self == addrA {
		c.LocalID = "a.test"
		c.Peers = []PeerConfig{{Endpoint: addrB, RemoteID: "b.test", LocalTS: netsA, RemoteTS: netsB, Initiate: true}}
	} else {
		c.LocalID = "b.test"
		c.Peers = []PeerConfig{{Endpoint: addrA, RemoteID: "a.test", LocalTS: netsB, RemoteTS: netsA}}
	}
	return c
}

// pair is two engines, A and B, on a testNet.
type pair struct {
	n            *testNet
	a, b         *Engine
	dpA, dpB     *fakeDP
	logsA, logsB *bytes.Buffer
	cfgA, cfgB   Config
}

// newPair makes A (initiating) and B after edit changes their configs.
func newPair(t *testing.T, edit func(a, b *Config)) *pair {
	t.Helper()
	p := &pair{n: newTestNet(t), dpA: newFakeDP(), dpB: newFakeDP(), logsA: &bytes.Buffer{}, logsB: &bytes.Buffer{}}
	p.cfgA, p.cfgB = baseConfig(addrA), baseConfig(addrB)
	if edit != nil {
		edit(&p.cfgA, &p.cfgB)
	}
	p.a = p.n.add(addrA, p.cfgA, p.dpA, p.logsA)
	p.b = p.n.add(addrB, p.cfgB, p.dpB, p.logsB)
	p.n.start()
	return p
}

// established checks that both sides have an IKE SA in use with the same
// SPIs and exactly one CHILD_SA each, whose keys mirror each other, and
// returns A's and B's CHILD_SA.
func (p *pair) established(t *testing.T) (ChildSA, ChildSA) {
	t.Helper()
	sa, sb := p.a.Status()[0], p.b.Status()[0]
	if sa.State != StateEstablished || sb.State != StateEstablished {
		t.Fatalf("states A %s (%s), B %s (%s); want both established", sa.State, sa.LastError, sb.State, sb.LastError)
	}
	if sa.IKESPIi != sb.IKESPIi || sa.IKESPIr != sb.IKESPIr || sa.IKESPIi == 0 || sa.IKESPIr == 0 {
		t.Fatalf("IKE SPIs A %x/%x, B %x/%x; want the same nonzero pair", sa.IKESPIi, sa.IKESPIr, sb.IKESPIi, sb.IKESPIr)
	}
	ca, cb := p.dpA.current(), p.dpB.current()
	if len(ca) != 1 || len(cb) != 1 {
		t.Fatalf("CHILD_SAs installed: A %d, B %d; want 1 each\nA: %v\nB: %v", len(ca), len(cb), p.dpA.eventLog(), p.dpB.eventLog())
	}
	mirrored(t, ca[0], cb[0])
	return ca[0], cb[0]
}

// mirrored checks that a and b are the two ends of one CHILD_SA.
func mirrored(t *testing.T, a, b ChildSA) {
	t.Helper()
	if a.InSPI != b.OutSPI || a.OutSPI != b.InSPI {
		t.Fatalf("SPIs A in %08x out %08x, B in %08x out %08x; want crossed", a.InSPI, a.OutSPI, b.InSPI, b.OutSPI)
	}
	if a.Transform != b.Transform {
		t.Fatalf("transforms A %+v, B %+v", a.Transform, b.Transform)
	}
	if a.Deferred == b.Deferred {
		t.Fatalf("Deferred A %v, B %v; want it set by the exchange's responder alone", a.Deferred, b.Deferred)
	}
	if !keysEqual(a.In, b.Out) || !keysEqual(a.Out, b.In) {
		t.Fatal("keys do not mirror: A.In != B.Out or A.Out != B.In")
	}
	if keysEqual(a.In, a.Out) {
		t.Fatal("both directions have the same keys")
	}
	wantE, wantI := a.Transform.KeyBits/8, 0
	if a.Transform.Encr == EncrAESGCM16 {
		wantE += 4
	} else {
		wantI = 32
	}
	if len(a.In.Encr) != wantE || len(a.In.Integ) != wantI {
		t.Fatalf("key sizes %d/%d, want %d/%d for %v", len(a.In.Encr), len(a.In.Integ), wantE, wantI, a.Transform)
	}
	if !slices.Equal(a.LocalTS, b.RemoteTS) || !slices.Equal(a.RemoteTS, b.LocalTS) {
		t.Fatalf("selectors A %v<->%v, B %v<->%v; want mirrored", a.LocalTS, a.RemoteTS, b.LocalTS, b.RemoteTS)
	}
}

func keysEqual(a, b Keys) bool {
	return bytes.Equal(a.Encr, b.Encr) && bytes.Equal(a.Integ, b.Integ)
}

// CountIKEDrop makes fakeDP a DropCounter.
func (d *fakeDP) CountIKEDrop(peer int, r DropReason) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.drops == nil {
		d.drops = map[DropReason]int{}
	}
	d.drops[r]++
}

// dropped returns the drops counted so far, by reason, and their sum.
func (d *fakeDP) dropped() (map[DropReason]int, int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	sum := 0
	for _, n := range d.drops {
		sum += n
	}
	return maps.Clone(d.drops), sum
}
