package esp

import (
	"net/netip"
	"strings"
	"sync"
	"testing"

	"github.com/snorkel-net/snorkel/transport"
)

func TestSetPeerRefusesInvalidPeersAndChangesNothing(t *testing.T) {
	taken := netip.MustParseAddrPort("192.0.2.1:4500")
	tests := []struct {
		name string
		i    int
		p    Peer
		want string
	}{
		{"no address", 3, Peer{}, "esp: Peers[3].Endpoint"},
		{"a multicast address", 3, Peer{Endpoint: netip.MustParseAddrPort("224.0.0.1:4500")}, "esp: Peers[3].Endpoint"},
		{"another peer's endpoint", 3, Peer{Endpoint: taken}, "esp: Peers[3].Endpoint 192.0.2.1:4500: already the endpoint of Peers[0]"},
		{"another peer's endpoint, mapped", 1, Peer{Endpoint: netip.MustParseAddrPort("[::ffff:192.0.2.1]:4500")}, "esp: Peers[1].Endpoint 192.0.2.1:4500: already the endpoint of Peers[0]"},
		{"a negative number", -1, Peer{Endpoint: local(7)}, "esp: Peers[-1]"},
		{"a number beyond the table", maxPeers, Peer{Endpoint: local(7)}, "esp: Peers[65536]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr := onFreePort(t, Config{Peers: []Peer{{Endpoint: taken}, {Endpoint: local(9)}}}, discard{})
			before := tr.peers.Load()
			err := tr.SetPeer(tt.i, tt.p)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("SetPeer(%d, %v) = %v, want an error containing %q", tt.i, tt.p.Endpoint, err, tt.want)
			}
			if tr.peers.Load() != before {
				t.Fatal("the peer table was replaced")
			}
			if got := *tr.peer(1).endpoint.Load(); got != local(9) {
				t.Fatalf("peer 1 moved to %v", got)
			}
		})
	}
}

// TestPeersComeAndGo starts a transport with no peers, adds b under a
// sparse number, removes it and adds another remote under that number,
// which must start clean.
func TestPeersComeAndGo(t *testing.T) {
	recA, recB := newRecorder(t), newRecorder(t)
	a := onFreePort(t, Config{}, recA)
	b := onFreePort(t, Config{Peers: []Peer{{Endpoint: local(a.Port())}}}, recB)
	if err := a.Send(0, nil, transport.Headroom); err == nil {
		t.Fatal("Send to a transport without peers succeeded")
	}
	if err := a.SetPeer(5, Peer{Endpoint: local(b.Port())}); err != nil {
		t.Fatal(err)
	}
	for _, hole := range []int{0, 4, 6} {
		if err := a.Send(hole, nil, transport.Headroom); err == nil {
			t.Fatalf("Send to peer %d, which was never set, succeeded", hole)
		}
	}
	ca, cb := childPair(gcm128, 5, 0, 0x1000)
	if err := b.InstallChild(cb); err != nil {
		t.Fatal(err)
	}
	if err := a.InstallChild(ca); err != nil {
		t.Fatal(err)
	}
	bufs, want := batchOf(4, false, 1)
	if err := a.Send(5, bufs, transport.Headroom); err != nil {
		t.Fatal(err)
	}
	checkDelivered(t, recB, want, 0)
	bufs, want = batchOf(3, true, 9)
	if err := b.Send(0, bufs, transport.Headroom); err != nil {
		t.Fatal(err)
	}
	checkDelivered(t, recA, want, 5)

	// Setting the same peer again keeps its SAs.
	if err := a.SetPeer(5, Peer{Endpoint: netip.AddrPortFrom(netip.MustParseAddr("::ffff:127.0.0.1"), b.Port())}); err != nil {
		t.Fatal(err)
	}
	if _, ok := a.Stats(5, ca.InSPI); !ok {
		t.Fatal("setting an unchanged peer uninstalled its CHILD_SA")
	}
	if err := a.RemovePeer(5); err != nil {
		t.Fatal(err)
	}
	if err := a.RemovePeer(5); err == nil {
		t.Fatal("removing a removed peer succeeded")
	}
	if err := a.Send(5, nil, transport.Headroom); err == nil {
		t.Fatal("Send to a removed peer succeeded")
	}
	if _, ok := a.Stats(5, ca.InSPI); ok {
		t.Fatal("a removed peer's CHILD_SA is still installed")
	}
	if _, ok := (*a.inbound.Load())[ca.InSPI]; ok {
		t.Fatal("the receive path still opens a removed peer's SA")
	}
	bufs, _ = batchOf(2, false, 3)
	if err := b.Send(0, bufs, transport.Headroom); err != nil {
		t.Fatal(err)
	}
	eventually(t, "b's packets to count as unknown SPIs", func() bool {
		return dropCount(a.Drops(), transport.PeerAny, "unknown_spi") == 2
	})
	if n := recA.count(); n != 0 {
		t.Fatalf("%d packets delivered after RemovePeer", n)
	}

	// Another remote under the same number starts with no SA and no
	// counts: the old one's no_sa drops do not carry over.
	if err := a.SetPeer(5, Peer{Endpoint: local(9)}); err != nil {
		t.Fatal(err)
	}
	for _, d := range a.Drops() {
		if d.Peer == 5 {
			t.Fatalf("the new peer 5 inherited %v", d)
		}
	}
	bufs, _ = batchOf(2, false, 3)
	if err := a.Send(5, bufs, transport.Headroom); err != nil {
		t.Fatal(err)
	}
	if n := dropCount(a.Drops(), 5, "no_sa"); n != 2 {
		t.Fatalf("the new peer 5 counted %d no_sa drops, want 2: it has no SA", n)
	}
}

// TestPeerChangesRaceTraffic changes and removes peers while packets flow
// both ways between a and b; run it with -race.
func TestPeerChangesRaceTraffic(t *testing.T) {
	p := newPair(t, 0)
	p.install(t, gcm128, 0x1000)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, dir := range []struct {
		from *Transport
		peer int
	}{{p.a, 1}, {p.b, 0}} {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				bufs, _ := batchOf(4, false, 1)
				if err := dir.from.Send(dir.peer, bufs, transport.Headroom); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if err := p.a.SetPeer(2+i%3, Peer{Endpoint: netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, 2}), uint16(1000+i%3))}); err != nil {
				t.Error(err)
				return
			}
			p.a.RemovePeer(2 + (i+1)%3)
			p.a.SetEndpoint(0, netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, 3}), uint16(1+i%50)))
			p.a.Drops()
			p.a.Overhead()
		}
	})
	eventually(t, "traffic both ways during the changes", func() bool {
		return p.recA.count() > 200 && p.recB.count() > 200
	})
	close(stop)
	wg.Wait()
}
