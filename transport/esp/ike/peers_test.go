package ike

import (
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

var (
	addrC = netip.MustParseAddrPort("192.0.2.3:4500")
	netsC = []netip.Prefix{netip.MustParsePrefix("10.3.0.0/16")}
)

// trio is a pair with a third gateway, C, that A adds as its peer 1
// once A and B are established.
type trio struct {
	*pair
	c   *Engine
	dpC *fakeDP
}

// peerC is C as A's peer 1.
var peerC = PeerConfig{Endpoint: addrC, RemoteID: "c.test", LocalTS: netsA, RemoteTS: netsC, Initiate: true}

func newTrio(t *testing.T) *trio {
	t.Helper()
	p := newPair(t, nil)
	p.n.run(time.Second)
	p.established(t)
	c := Config{PSK: psk, LocalID: "c.test", Peers: []PeerConfig{{Endpoint: addrA, RemoteID: "a.test", LocalTS: netsC, RemoteTS: netsA}}}
	tr := &trio{pair: p, dpC: newFakeDP()}
	tr.c = p.n.add(addrC, c, tr.dpC, nil)
	tr.c.start(p.n.now)
	if err := p.a.setPeer(1, mustPeer(t, 1, peerC), p.n.now); err != nil {
		t.Fatal(err)
	}
	p.n.run(time.Second)
	return tr
}

func mustPeer(t *testing.T, i int, pc PeerConfig) peerSettings {
	t.Helper()
	ps, err := pc.validate(i)
	if err != nil {
		t.Fatal(err)
	}
	return ps
}

// childrenOf returns the CHILD_SAs of peer installed in d.
func childrenOf(d *fakeDP, peer int) []ChildSA {
	var out []ChildSA
	for _, c := range d.current() {
		if c.Peer == peer {
			out = append(out, c)
		}
	}
	return out
}

// sameSAs fails unless peer's IKE SA and CHILD_SAs in st are those of was.
func sameSAs(t *testing.T, what string, was, st PeerStatus) {
	t.Helper()
	if st.State != StateEstablished || st.IKESPIi != was.IKESPIi || st.IKESPIr != was.IKESPIr || !reflect.DeepEqual(st.Children, was.Children) {
		t.Fatalf("%s: status %+v, want the SAs unchanged: %+v", what, st, was)
	}
}

func TestAddingAPeerLeavesTheOthersAlone(t *testing.T) {
	p := newPair(t, nil)
	p.n.run(time.Second)
	p.established(t)
	before := p.a.Status()[0]
	eventsB := len(p.dpB.eventLog())
	tr := &trio{pair: p, dpC: newFakeDP()}
	tr.c = p.n.add(addrC, Config{PSK: psk, LocalID: "c.test", Peers: []PeerConfig{{Endpoint: addrA, RemoteID: "a.test", LocalTS: netsC, RemoteTS: netsA}}}, tr.dpC, nil)
	tr.c.start(p.n.now)
	if err := p.a.setPeer(1, mustPeer(t, 1, peerC), p.n.now); err != nil {
		t.Fatal(err)
	}
	p.n.run(time.Second)
	st := p.a.Status()
	if len(st) != 2 || st[1].State != StateEstablished || len(childrenOf(p.dpA, 1)) != 1 || len(tr.dpC.current()) != 1 {
		t.Fatalf("A's status %+v; want the new peer established with one CHILD_SA", st)
	}
	mirrored(t, childrenOf(p.dpA, 1)[0], tr.dpC.current()[0])
	sameSAs(t, "B", before, st[0])
	if ev := p.dpB.eventLog(); len(ev) != eventsB {
		t.Fatalf("B's data plane changed: %v", ev[eventsB:])
	}
}

func TestRemovingAPeer(t *testing.T) {
	tr := newTrio(t)
	before := tr.a.Status()[0]
	if err := tr.a.removePeer(1, tr.n.now); err != nil {
		t.Fatal(err)
	}
	if err := tr.a.removePeer(1, tr.n.now); err == nil {
		t.Fatal("removing a removed peer succeeded")
	}
	tr.n.run(time.Second)
	st := tr.a.Status()
	if len(st) != 1 {
		t.Fatalf("A's status lists %d peers after removing peer 1 of 2", len(st))
	}
	sameSAs(t, "B", before, st[0])
	if c := childrenOf(tr.dpA, 1); len(c) != 0 {
		t.Fatalf("the removed peer's CHILD_SAs are installed: %v", c)
	}
	if len(tr.a.spis) != 1 {
		t.Fatalf("A holds %d inbound SPIs, want B's alone", len(tr.a.spis))
	}
	if s := tr.c.Status()[0]; s.State != StateDown || len(tr.dpC.current()) != 0 {
		t.Fatalf("C after A's Delete: %+v; want it to have dropped its SAs", s)
	}
	for _, sa := range tr.a.sas {
		if sa.p.idx == 1 {
			t.Fatal("an IKE SA of the removed peer is left, with its timers")
		}
	}
	// A later peer under the same number starts from nothing.
	if err := tr.a.setPeer(1, mustPeer(t, 1, peerC), tr.n.now); err != nil {
		t.Fatal(err)
	}
	tr.n.run(time.Second)
	if s := tr.a.Status()[1]; s.State != StateEstablished || s.LastError != "" || len(childrenOf(tr.dpA, 1)) != 1 {
		t.Fatalf("peer 1 set again: %+v", s)
	}
}

func TestChangingRemoteIDSetsThePeerUpAgain(t *testing.T) {
	tr := newTrio(t)
	was := tr.a.Status()
	changed := peerC
	changed.RemoteID = ""
	if err := tr.a.setPeer(1, mustPeer(t, 1, changed), tr.n.now); err != nil {
		t.Fatal(err)
	}
	tr.n.run(time.Second)
	st := tr.a.Status()
	sameSAs(t, "B", was[0], st[0])
	if st[1].State != StateEstablished || st[1].IKESPIi == was[1].IKESPIi || len(st[1].Children) != 1 || st[1].Children[0].InSPI == was[1].Children[0].InSPI {
		t.Fatalf("C: %+v, was %+v; want new SAs", st[1], was[1])
	}
	if len(childrenOf(tr.dpA, 1)) != 1 || len(tr.dpC.current()) != 1 {
		t.Fatal("the old CHILD_SA with C outlived its IKE SA")
	}
}

func TestChangingTheEndpoint(t *testing.T) {
	moved := netip.MustParseAddrPort("198.51.100.2:4501")
	t.Run("the remote kept its state", func(t *testing.T) {
		p := newPair(t, nil)
		p.n.run(time.Second)
		p.established(t)
		was := p.a.Status()[0]
		p.n.addrs = append(p.n.addrs, moved)
		p.n.engines = append(p.n.engines, p.b)
		pc := p.cfgA.Peers[0]
		pc.Endpoint = moved
		if err := p.a.setPeer(0, mustPeer(t, 0, pc), p.n.now); err != nil {
			t.Fatal(err)
		}
		p.n.run(time.Second)
		sameSAs(t, "B", was, p.a.Status()[0])
		if n := p.n.countTo(moved, exchInformational); n == 0 {
			t.Fatal("no liveness check went to the new address")
		}
		if n := p.n.count(addrB, exchInformational, true); n == 0 {
			t.Fatal("B did not answer the liveness check")
		}
	})
	t.Run("a new remote there lost the state", func(t *testing.T) {
		p := newPair(t, func(a, b *Config) { a.RetransmitTimeout, a.RetransmitTries = 100*time.Millisecond, 3 })
		p.n.run(time.Second)
		p.established(t)
		was := p.a.Status()[0]
		dp := newFakeDP()
		p.n.add(moved, baseConfig(addrB), dp, nil).start(p.n.now)
		pc := p.cfgA.Peers[0]
		pc.Endpoint = moved
		if err := p.a.setPeer(0, mustPeer(t, 0, pc), p.n.now); err != nil {
			t.Fatal(err)
		}
		p.n.run(5 * time.Second)
		st := p.a.Status()[0]
		if st.State != StateEstablished || st.IKESPIi == was.IKESPIi || len(dp.current()) != 1 {
			t.Fatalf("A: %+v; want a new IKE SA with the remote at the new address", st)
		}
		mirrored(t, p.dpA.current()[0], dp.current()[0])
	})
}

// countTo counts the messages sent to to with the exchange given.
func (n *testNet) countTo(to netip.AddrPort, exchange uint8) int {
	c := 0
	for _, p := range n.sent {
		if p.to == to && len(p.msg) >= headerLen && p.msg[18] == exchange {
			c++
		}
	}
	return c
}

// neverWithout fails if the replay of the data plane's events ever left
// peer without a CHILD_SA once the first was installed.
func neverWithout(t *testing.T, name string, d *fakeDP) {
	t.Helper()
	installed := map[string]bool{}
	for i, ev := range d.eventLog() {
		op, spi, _ := strings.Cut(ev, " ")
		installed[spi] = op == "install"
		if op == "delete" {
			delete(installed, spi)
			if len(installed) == 0 {
				t.Fatalf("%s had no CHILD_SA after event %d: %v", name, i, d.eventLog())
			}
		}
	}
}

func TestChangingTrafficSelectors(t *testing.T) {
	wider := []netip.Prefix{netip.MustParsePrefix("10.1.0.0/16"), netip.MustParsePrefix("10.11.0.0/16")}
	other := []netip.Prefix{netip.MustParsePrefix("10.21.0.0/16")}
	tests := []struct {
		name string
		// A's LocalTS and B's RemoteTS after the change.
		ts []netip.Prefix
		// first is the side that changes first.
		first string
	}{
		{"extended, the initiator first", wider, "A"},
		{"extended, the responder first", wider, "B"},
		{"replaced, which the peer refuses until it has the change", other, "A"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newPair(t, nil)
			p.n.run(time.Second)
			first, _ := p.established(t)
			pa, pb := p.cfgA.Peers[0], p.cfgB.Peers[0]
			pa.LocalTS, pb.RemoteTS = tt.ts, tt.ts
			setA := func() {
				if err := p.a.setPeer(0, mustPeer(t, 0, pa), p.n.now); err != nil {
					t.Fatal(err)
				}
			}
			setB := func() {
				if err := p.b.setPeer(0, mustPeer(t, 0, pb), p.n.now); err != nil {
					t.Fatal(err)
				}
			}
			firstSet, thenSet := setA, setB
			if tt.first == "B" {
				firstSet, thenSet = setB, setA
			}
			ikeBefore := p.a.Status()[0]
			firstSet()
			p.n.run(10 * time.Second)
			// Not yet both: a CHILD_SA with the old selectors carries
			// the traffic.
			ca, _ := p.established(t)
			if !slices.Equal(ca.LocalTS, first.LocalTS) {
				t.Fatalf("with one side changed, A's CHILD_SA carries %v, want the old %v", ca.LocalTS, first.LocalTS)
			}
			tries := p.n.count(p.n.addrs[slices.Index([]string{"A", "B"}, tt.first)], exchCreateChildSA, false)
			if tries < 2 || tries > 6 {
				t.Fatalf("%s sent %d CREATE_CHILD_SA requests in 10 s; want a few retries with backoff", tt.first, tries)
			}
			thenSet()
			p.n.run(time.Minute)
			ca, _ = p.established(t)
			if !slices.Equal(ca.LocalTS, canonical(tt.ts)) || ca.InSPI == first.InSPI {
				t.Fatalf("after both changed, A's CHILD_SA %08x carries %v, want a new one with %v", ca.InSPI, ca.LocalTS, tt.ts)
			}
			neverWithout(t, "A", p.dpA)
			neverWithout(t, "B", p.dpB)
			if st := p.a.Status()[0]; st.IKESPIi != ikeBefore.IKESPIi || st.LastError != "" {
				t.Fatalf("the IKE SA changed or an error was reported: %+v", st)
			}
			quiet := p.n.count(p.n.addrs[0], exchCreateChildSA, false) + p.n.count(p.n.addrs[1], exchCreateChildSA, false)
			p.n.run(10 * time.Minute)
			if n := p.n.count(p.n.addrs[0], exchCreateChildSA, false) + p.n.count(p.n.addrs[1], exchCreateChildSA, false); n != quiet {
				t.Fatalf("%d more CREATE_CHILD_SA once the selectors agree; want none", n-quiet)
			}
		})
	}
}

func TestSetPeerRefusesInvalidPeersAndChangesNothing(t *testing.T) {
	tests := []struct {
		name string
		i    int
		pc   PeerConfig
		want string
	}{
		{"no endpoint", 3, PeerConfig{LocalTS: netsA, RemoteTS: netsC}, "ike: Peers[3].Endpoint"},
		{"another peer's address", 3, PeerConfig{Endpoint: netip.MustParseAddrPort("192.0.2.2:4600"), LocalTS: netsA, RemoteTS: netsC}, "ike: Peers[3].Endpoint 192.0.2.2:4600: address already used by Peers[0]"},
		{"no LocalTS", 0, PeerConfig{Endpoint: addrB, RemoteTS: netsB}, "ike: Peers[0].LocalTS: empty"},
		{"a bad RemoteID", 0, PeerConfig{Endpoint: addrB, RemoteID: "keyid:#zz", LocalTS: netsA, RemoteTS: netsB}, "ike: Peers[0].RemoteID"},
		{"a negative number", -1, PeerConfig{Endpoint: addrC, LocalTS: netsA, RemoteTS: netsC}, "ike: Peers[-1]"},
		{"a number beyond the table", maxPeers, PeerConfig{Endpoint: addrC, LocalTS: netsA, RemoteTS: netsC}, "ike: Peers[65536]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newPair(t, nil)
			p.n.run(time.Second)
			p.established(t)
			was, sent := p.a.Status(), len(p.n.sent)
			err := p.a.SetPeer(tt.i, tt.pc)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("SetPeer: %v, want an error containing %q", err, tt.want)
			}
			if st := p.a.Status(); !reflect.DeepEqual(st, was) || len(p.n.sent) != sent {
				t.Fatalf("state changed: %+v, was %+v", st, was)
			}
		})
	}
}

func TestStatusOfSparsePeers(t *testing.T) {
	e, err := NewEngine(Config{LocalID: "a.test", PSK: psk}, newFakeDP(), netSender{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.SetPeer(2, peerC); err != nil {
		t.Fatal(err)
	}
	st := e.Status()
	if len(st) != 3 || !reflect.DeepEqual(st[0], PeerStatus{}) || !reflect.DeepEqual(st[1], PeerStatus{}) || st[2].Endpoint != addrC || st[2].State != StateDown {
		t.Fatalf("status %+v; want holes at 0 and 1 and peer 2 down until Run", st)
	}
}
