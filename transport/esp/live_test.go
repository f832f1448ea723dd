package esp

import (
	"context"
	"encoding/binary"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/snorkel-net/snorkel/transport"
	"github.com/snorkel-net/snorkel/transport/esp/ike"
	"github.com/snorkel-net/snorkel/transport/internal/transporttest"
)

// Tests here wire transports to running IKE engines on loopback, as the
// gateway does, and change their peers while packets flow. Peers of one
// engine are told apart by address, so the hub's spokes sit at 127.0.0.1
// and ::1.

var (
	loop4 = netip.MustParseAddr("127.0.0.1")
	loop6 = netip.MustParseAddr("::1")
	netA  = []netip.Prefix{netip.MustParsePrefix("10.1.0.0/16")}
	netB  = []netip.Prefix{netip.MustParsePrefix("10.2.0.0/16")}
	netC  = []netip.Prefix{netip.MustParsePrefix("10.3.0.0/16")}
)

// gateway is a transport keyed by its own running IKE engine.
type gateway struct {
	id  string
	tr  *Transport
	eng *ike.Engine
	rec *recorder
}

func newGateway(t *testing.T, id string) *gateway {
	t.Helper()
	g := &gateway{id: id, rec: newRecorder(t)}
	g.tr = onFreePort(t, Config{}, g.rec)
	eng, err := ike.NewEngine(ike.Config{
		LocalID: id, PSK: []byte("snorkel-test-psk-0123456789abcdef"),
		RetransmitTimeout: 100 * time.Millisecond, RetransmitTries: 4,
	}, g.tr, g.tr, nil)
	if err != nil {
		t.Fatal(err)
	}
	g.eng = eng
	g.tr.SetIKEHandler(eng.Receive)
	g.tr.SetMoveHandler(eng.Follow)
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { eng.Run(ctx) })
	t.Cleanup(func() {
		stop()
		wg.Wait()
	})
	return g
}

// at is g's endpoint at address a.
func (g *gateway) at(a netip.Addr) netip.AddrPort { return netip.AddrPortFrom(a, g.tr.Port()) }

// set makes pc peer i of g, in the transport and the engine alike.
func (g *gateway) set(t *testing.T, i int, pc ike.PeerConfig) {
	t.Helper()
	if err := g.tr.SetPeer(i, Peer{Endpoint: pc.Endpoint}); err != nil {
		t.Fatal(err)
	}
	if err := g.eng.SetPeer(i, pc); err != nil {
		t.Fatal(err)
	}
}

// link makes o g's peer i, which g initiates to at address oa, and g
// o's peer j, at address a; gts and ots are the CIDRs behind them.
func link(t *testing.T, g *gateway, i int, gts []netip.Prefix, o *gateway, j int, oa netip.Addr, ots []netip.Prefix, a netip.Addr) {
	t.Helper()
	o.set(t, j, ike.PeerConfig{Endpoint: g.at(a), RemoteID: g.id, LocalTS: ots, RemoteTS: gts})
	g.set(t, i, ike.PeerConfig{Endpoint: o.at(oa), RemoteID: o.id, LocalTS: gts, RemoteTS: ots, Initiate: true})
}

// up waits until g has an IKE SA with peer i and a CHILD_SA whose both
// halves are installed, and returns g's status of i.
func (g *gateway) up(t *testing.T, i int, o *gateway, j int) ike.PeerStatus {
	t.Helper()
	var st ike.PeerStatus
	eventually(t, g.id+" to set up peer "+o.id, func() bool {
		all, other := g.eng.Status(), o.eng.Status()
		if i >= len(all) || j >= len(other) {
			return false
		}
		st = all[i]
		return st.State == ike.StateEstablished && len(st.Children) == 1 && other[j].State == ike.StateEstablished &&
			len(other[j].Children) == 1 && other[j].Children[0].InSPI == st.Children[0].OutSPI
	})
	return st
}

// stream sends numbered packets from a transport to one of its peers,
// one at a time, each once the one before has arrived, so that a packet
// can be missing only because no SA carried it.
type stream struct {
	sent       atomic.Int64
	stop, done chan struct{}
}

func startStream(t *testing.T, from *Transport, peer int, to *recorder, src netip.Addr) *stream {
	s := &stream{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		base := to.count()
		for n := 0; ; n++ {
			select {
			case <-s.stop:
				return
			default:
			}
			pkt := ipv4(src, ip4B, binary.BigEndian.AppendUint32(nil, uint32(n)))
			if err := from.Send(peer, [][]byte{withHeadroom(pkt)}, transport.Headroom); err != nil {
				t.Error(err)
				return
			}
			for deadline := time.Now().Add(settle); to.count() < base+n+1; time.Sleep(50 * time.Microsecond) {
				if time.Now().After(deadline) {
					t.Errorf("packet %d never arrived: a gap in the traffic", n)
					return
				}
			}
			s.sent.Store(int64(n + 1))
		}
	}()
	return s
}

// more waits for n more packets to arrive.
func (s *stream) more(t *testing.T, n int64) {
	t.Helper()
	want := s.sent.Load() + n
	eventually(t, "more packets", func() bool {
		select {
		case <-s.done:
			return true
		default:
			return s.sent.Load() >= want
		}
	})
	if s.sent.Load() < want {
		t.FailNow()
	}
}

// halt stops s and checks every packet arrived once, in order.
func (s *stream) halt(t *testing.T, to *recorder) {
	t.Helper()
	close(s.stop)
	<-s.done
	if t.Failed() {
		t.FailNow()
	}
	pkts, _ := to.take()
	for i, p := range pkts {
		if n := binary.BigEndian.Uint32(p[20:]); n != uint32(i) {
			t.Fatalf("packet %d is number %d", i, n)
		}
	}
}

// sameSAs fails unless st has the IKE SA and CHILD_SAs of was.
func sameSAs(t *testing.T, what string, was, st ike.PeerStatus) {
	t.Helper()
	if st.State != ike.StateEstablished || st.IKESPIi != was.IKESPIi || st.IKESPIr != was.IKESPIr || len(st.Children) != len(was.Children) {
		t.Fatalf("%s: %+v, want the SAs of %+v", what, st, was)
	}
	for i := range st.Children {
		if st.Children[i].InSPI != was.Children[i].InSPI || st.Children[i].OutSPI != was.Children[i].OutSPI {
			t.Fatalf("%s: CHILD_SA %d is %08x/%08x, was %08x/%08x", what, i, st.Children[i].InSPI, st.Children[i].OutSPI, was.Children[i].InSPI, was.Children[i].OutSPI)
		}
	}
}

// hub is A with spoke B at 127.0.0.1 as its peer 0.
func hub(t *testing.T) (a, b *gateway) {
	a, b = newGateway(t, "a.test"), newGateway(t, "b.test")
	link(t, a, 0, netA, b, 0, loop4, netB, loop4)
	a.up(t, 0, b, 0)
	return a, b
}

// addC adds spoke C at ::1 as A's peer 1.
func addC(t *testing.T, a *gateway) *gateway {
	c := newGateway(t, "c.test")
	link(t, a, 1, netA, c, 0, loop6, netC, loop6)
	return c
}

func TestAddingAPeerWhileTrafficFlows(t *testing.T) {
	a, b := hub(t)
	s := startStream(t, a.tr, 0, b.rec, ip4A)
	s.more(t, 20)
	was := a.eng.Status()[0]
	c := addC(t, a)
	a.up(t, 1, c, 0)
	bufs, want := batchOf(3, true, 1)
	if err := a.tr.Send(1, bufs, transport.Headroom); err != nil {
		t.Fatal(err)
	}
	checkDelivered(t, c.rec, want, 0)
	s.more(t, 20)
	s.halt(t, b.rec)
	sameSAs(t, "B after C was added", was, a.eng.Status()[0])
	if n := dropCount(a.tr.Drops(), 0, "no_sa"); n != 0 {
		t.Fatalf("%d packets to B found no SA", n)
	}
}

func TestRemovingAPeer(t *testing.T) {
	a, b := hub(t)
	c := addC(t, a)
	cst := a.up(t, 1, c, 0)
	was := a.eng.Status()[0]
	if err := a.eng.RemovePeer(1); err != nil {
		t.Fatal(err)
	}
	if err := a.tr.RemovePeer(1); err != nil {
		t.Fatal(err)
	}
	if st := a.eng.Status(); len(st) != 1 {
		t.Fatalf("A's engine lists %d peers after removing peer 1 of 2", len(st))
	}
	if err := a.tr.Send(1, nil, transport.Headroom); err == nil {
		t.Fatal("Send to the removed peer succeeded")
	}
	if _, ok := a.tr.Stats(1, cst.Children[0].InSPI); ok {
		t.Fatal("the removed peer's CHILD_SA is installed")
	}
	eventually(t, "C to hear of the Delete", func() bool { return c.eng.Status()[0].State != ike.StateEstablished })
	sameSAs(t, "B after C was removed", was, a.eng.Status()[0])
	s := startStream(t, a.tr, 0, b.rec, ip4A)
	s.more(t, 10)
	s.halt(t, b.rec)
}

func TestChangingTheEndpoint(t *testing.T) {
	a, b := hub(t)
	s := startStream(t, a.tr, 0, b.rec, ip4A)
	s.more(t, 10)
	s.halt(t, b.rec)
	was := a.eng.Status()[0]
	// B is reachable at ::1 as well: as far as A can tell it moved there
	// with its state, as after a NAT rebinding. A's packets come from ::1
	// too, so B follows A there.
	a.set(t, 0, ike.PeerConfig{Endpoint: b.at(loop6), RemoteID: b.id, LocalTS: netA, RemoteTS: netB, Initiate: true})
	s = startStream(t, a.tr, 0, b.rec, ip4A)
	s.more(t, 10)
	s.halt(t, b.rec)
	eventually(t, "the liveness check at the new address to be answered", func() bool {
		st := a.eng.Status()[0]
		return st.LastError == "" && *b.tr.peer(0).endpoint.Load() == a.at(loop6)
	})
	sameSAs(t, "B after it moved", was, a.eng.Status()[0])
}

func TestChangingTheEndpointToARemoteThatLostItsState(t *testing.T) {
	a, b := hub(t)
	was := a.eng.Status()[0]
	// B's successor at another port knows nothing of the SAs; the
	// liveness check finds that out and A sets up new ones.
	b2 := newGateway(t, "b.test")
	b2.set(t, 0, ike.PeerConfig{Endpoint: a.at(loop4), RemoteID: a.id, LocalTS: netB, RemoteTS: netA})
	b.tr.Close()
	a.set(t, 0, ike.PeerConfig{Endpoint: b2.at(loop4), RemoteID: b.id, LocalTS: netA, RemoteTS: netB, Initiate: true})
	st := a.up(t, 0, b2, 0)
	if st.IKESPIi == was.IKESPIi {
		t.Fatal("A kept the IKE SA of the remote that lost it")
	}
	s := startStream(t, a.tr, 0, b2.rec, ip4A)
	s.more(t, 10)
	s.halt(t, b2.rec)
}

func TestChangingRemoteIDSetsOnlyThatPeerUpAgain(t *testing.T) {
	a, b := hub(t)
	c := addC(t, a)
	was := a.eng.Status()
	wasC := a.up(t, 1, c, 0)
	s := startStream(t, a.tr, 0, b.rec, ip4A)
	s.more(t, 10)
	a.set(t, 1, ike.PeerConfig{Endpoint: c.at(loop6), LocalTS: netA, RemoteTS: netC, Initiate: true})
	eventually(t, "C set up again", func() bool {
		st := a.eng.Status()[1]
		return st.State == ike.StateEstablished && st.IKESPIi != wasC.IKESPIi && len(st.Children) == 1
	})
	a.up(t, 1, c, 0)
	s.more(t, 10)
	s.halt(t, b.rec)
	sameSAs(t, "B after C's RemoteID changed", was[0], a.eng.Status()[0])
}

func TestExtendingTrafficSelectorsLosesNothing(t *testing.T) {
	a, b := hub(t)
	wider := []netip.Prefix{netA[0], netip.MustParsePrefix("10.11.0.0/16")}
	first := a.eng.Status()[0]
	s := startStream(t, a.tr, 0, b.rec, ip4A)
	s.more(t, 10)
	// A's cluster grew; B hears of it a moment later.
	a.set(t, 0, ike.PeerConfig{Endpoint: b.at(loop4), RemoteID: b.id, LocalTS: wider, RemoteTS: netB, Initiate: true})
	s.more(t, 50)
	sameSAs(t, "B before it has the change", first, a.eng.Status()[0])
	b.set(t, 0, ike.PeerConfig{Endpoint: a.at(loop4), RemoteID: a.id, LocalTS: netB, RemoteTS: wider})
	var now ike.PeerStatus
	eventually(t, "a CHILD_SA with the new selectors", func() bool {
		now = a.eng.Status()[0]
		return len(now.Children) == 1 && slices.Equal(now.Children[0].LocalTS, wider)
	})
	s.more(t, 10)
	s.halt(t, b.rec)
	if now.IKESPIi != first.IKESPIi {
		t.Fatal("the IKE SA was replaced")
	}
	// Traffic from the new prefix goes on the new CHILD_SA.
	inB := now.Children[0].OutSPI
	before, _ := b.tr.Stats(0, inB)
	pkt := ipv4(netip.MustParseAddr("10.11.0.1"), ip4B, []byte("from the new prefix"))
	if err := a.tr.Send(0, [][]byte{withHeadroom(pkt)}, transport.Headroom); err != nil {
		t.Fatal(err)
	}
	b.rec.wait(t, 1)
	if after, ok := b.tr.Stats(0, inB); !ok || after.InBytes <= before.InBytes {
		t.Fatalf("B's CHILD_SA %08x opened %d bytes, before %d", inB, after.InBytes, before.InBytes)
	}
	for _, g := range []*gateway{a, b} {
		for _, d := range g.tr.Drops() {
			if d.Reason == "no_sa" || d.Reason == "unknown_spi" {
				t.Fatalf("%s dropped %v", g.id, d)
			}
		}
	}
}

// TestPeerChangesRaceEngineAndTraffic adds, changes and removes a peer in
// a loop while packets flow to another; run it with -race.
func TestPeerChangesRaceEngineAndTraffic(t *testing.T) {
	a, b := hub(t)
	s := startStream(t, a.tr, 0, b.rec, ip4A)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			ts := []netip.Prefix{netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 3, byte(i), 0}), 24)}
			pc := ike.PeerConfig{Endpoint: netip.AddrPortFrom(loop6, 9), LocalTS: netA, RemoteTS: ts, Initiate: i%2 == 0}
			if err := a.tr.SetPeer(1, Peer{Endpoint: pc.Endpoint}); err != nil {
				t.Error(err)
				return
			}
			if err := a.eng.SetPeer(1, pc); err != nil {
				t.Error(err)
				return
			}
			a.eng.Status()
			if i%3 == 0 {
				if err := a.eng.RemovePeer(1); err != nil {
					t.Error(err)
				}
				if err := a.tr.RemovePeer(1); err != nil {
					t.Error(err)
				}
			}
		}
	})
	s.more(t, 100)
	close(stop)
	wg.Wait()
	s.halt(t, b.rec)
}

// TestNATRebindingIsFollowed puts A behind a NAT that B knows only by the
// mapping's outside address. The NAT gives the mapping a new port, then a
// new address, as one does that lost its state: each time, A's next
// packets move B's endpoint there, B's packets reach A again, and the SAs
// stay the same.
func TestNATRebindingIsFollowed(t *testing.T) {
	a, b := newGateway(t, "a.test"), newGateway(t, "b.test")
	nat := transporttest.NewNAT(t, b.at(loop4))
	b.set(t, 0, ike.PeerConfig{Endpoint: nat.Outside(), RemoteID: a.id, LocalTS: netB, RemoteTS: netA})
	a.set(t, 0, ike.PeerConfig{Endpoint: nat.Inside(), RemoteID: b.id, LocalTS: netA, RemoteTS: netB, Initiate: true})
	a.up(t, 0, b, 0)
	was := b.eng.Status()[0]
	for i, to := range []netip.Addr{loop4, netip.MustParseAddr("127.0.0.2")} {
		nat.Rebind(t, to)
		there := startStream(t, a.tr, 0, b.rec, ip4A)
		there.more(t, 5)
		there.halt(t, b.rec)
		if got := *b.tr.peer(0).endpoint.Load(); got != nat.Outside() {
			t.Fatalf("rebinding %d: B sends to %v, want the new mapping %v", i+1, got, nat.Outside())
		}
		back := startStream(t, b.tr, 0, a.rec, ip4B)
		back.more(t, 5)
		back.halt(t, a.rec)
	}
	if got := b.tr.Moved(0); got != 2 {
		t.Errorf("Moved = %d, want 2, one per rebinding", got)
	}
	sameSAs(t, "B after the rebindings", was, b.eng.Status()[0])
}
