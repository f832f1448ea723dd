package natdiscovery

import (
	"context"
	"net"
	"net/netip"
	"testing"
	"time"
)

func listen(t *testing.T, id string, key Key) *Conn {
	t.Helper()
	c, err := Listen(netip.MustParseAddrPort("127.0.0.1:0"), id, key)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestDiscoverOverLoopback has a remote that answers at one of its two
// addresses (127.0.0.1) and not at the other (127.0.0.2, where nothing
// listens).
func TestDiscoverOverLoopback(t *testing.T) {
	local, remote := listen(t, "c1", testKey), listen(t, "c2", testKey)
	port := remote.LocalAddr().Port()
	answers, silent := netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("127.0.0.2")
	for _, tc := range []struct {
		name            string
		private, public netip.Addr
		want            Result
	}{
		{"private answers", answers, silent, Result{Addr: answers, Seen: local.LocalAddr()}},
		{"only public answers", silent, answers, Result{Addr: answers, NAT: true, Seen: local.LocalAddr()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			got := Discover(ctx, local, Target{Cluster: "c2", Private: tc.private, Public: tc.public, Port: port})
			if got != tc.want {
				t.Errorf("Discover = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestProbeRefusesStrangers(t *testing.T) {
	local := listen(t, "c1", testKey)
	stranger := listen(t, "c2", NewKey([]byte("not the clusterset's key")))
	wrongID := listen(t, "c3", testKey)
	probe := func(to netip.AddrPort) (netip.AddrPort, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		return local.Probe(ctx, to, "c2")
	}
	if s, err := probe(stranger.LocalAddr()); err == nil {
		t.Errorf("a gateway without the key answered %v", s)
	}
	if s, err := probe(wrongID.LocalAddr()); err == nil {
		t.Errorf("cluster c3 answered for c2: %v", s)
	}
	if d := stranger.Drops()[DropMAC]; d == 0 {
		t.Errorf("the stranger counted no MAC drop: %v", stranger.Drops())
	}
	if d := wrongID.Drops()[DropNotForUs]; d == 0 {
		t.Errorf("c3 counted no request for another cluster: %v", wrongID.Drops())
	}
}

func TestGarbageIsCountedAndServingGoesOn(t *testing.T) {
	remote := listen(t, "c2", testKey)
	pc, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(remote.LocalAddr()))
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	unasked := (&Message{Type: Response, From: "c1", To: "c2", Seen: netip.MustParseAddrPort("192.0.2.1:1")}).Append(nil, &testKey)
	for _, b := range [][]byte{{}, []byte("snkd garbage"), unasked} {
		if _, err := pc.Write(b); err != nil {
			t.Fatal(err)
		}
	}
	local := listen(t, "c1", testKey)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := local.Probe(ctx, remote.LocalAddr(), "c2"); err != nil {
		t.Fatalf("after garbage: %v", err)
	}
	for ctx.Err() == nil {
		d := remote.Drops()
		if d[DropMalformed] == 2 && d[DropUnexpected] == 1 {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Errorf("drops %v, want 2 malformed and 1 unexpected", remote.Drops())
}
