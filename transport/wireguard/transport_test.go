package wireguard

import (
	"bytes"
	"errors"
	"net/netip"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/snorkel-net/snorkel/transport"
	"github.com/snorkel-net/snorkel/transport/internal/transporttest"
)

var (
	hostA = netip.MustParseAddr("10.1.0.5")
	hostB = netip.MustParseAddr("10.2.0.7")
)

// sendPackets sends n packets from src to dst with sequence numbers from seq
// to peer 0 and returns copies of what was sent.
func sendPackets(t *testing.T, tr *Transport, src, dst netip.Addr, n, size int, seq uint32) [][]byte {
	t.Helper()
	return sendToPeer(t, tr, 0, src, dst, n, size, seq)
}

// sendToPeer is sendPackets to peer number peer.
func sendToPeer(t *testing.T, tr *Transport, peer int, src, dst netip.Addr, n, size int, seq uint32) [][]byte {
	t.Helper()
	bufs := newBatch(n)
	want := make([][]byte, n)
	for i := range bufs {
		bufs[i] = ipv4UDP(bufs[i], transport.Headroom, src, dst, size, seq+uint32(i))
		want[i] = append([]byte(nil), bufs[i][transport.Headroom:]...)
	}
	if err := tr.Send(peer, bufs, transport.Headroom); err != nil {
		t.Fatalf("Send to peer %d: %v", peer, err)
	}
	// The transport must have copied the packets: scribbling over the
	// buffers now must not change what arrives.
	for _, b := range bufs {
		clear(b)
	}
	return want
}

func checkSame(t *testing.T, dir string, got, want [][]byte) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d packets arrived, want %d", dir, len(got), len(want))
	}
	// UDP may reorder across the device's parallel workers only between
	// batches, but match by content so the test states what matters.
	seen := make(map[string]int)
	for _, w := range want {
		seen[string(w)]++
	}
	for i, g := range got {
		if seen[string(g)] == 0 {
			t.Fatalf("%s: packet %d (%d bytes) was not sent or arrived twice", dir, i, len(g))
		}
		seen[string(g)]--
	}
}

func TestBatchesCrossBothWays(t *testing.T) {
	p := newPair(t, nil, nil)

	const n = 64
	wantAB := sendPackets(t, p.a, hostA, hostB, n, 1400, 1000)
	checkSame(t, "A to B", p.cb.waitFor(t, n), wantAB)

	// B learned A's endpoint from the handshake and answers with sizes from
	// a minimal header up to the MTU.
	var wantBA [][]byte
	for i, size := range []int{28 + 4, 100, 576, 1400, DefaultMTU} {
		wantBA = append(wantBA, sendPackets(t, p.b, hostB, hostA, 3, size, uint32(i*10))...)
	}
	checkSame(t, "B to A", p.ca.waitFor(t, len(wantBA)), wantBA)

	for _, peers := range [][]int{p.ca.peers, p.cb.peers} {
		for _, peer := range peers {
			if peer != transport.PeerAny {
				t.Fatalf("Deliver got peer %d, want PeerAny", peer)
			}
		}
	}
	time.Sleep(100 * time.Millisecond)
	if n := p.cb.count(); n != len(wantAB) {
		t.Errorf("B received %d packets in all, want %d", n, len(wantAB))
	}
	for name, tr := range map[string]*Transport{"A": p.a, "B": p.b} {
		if ds := tr.Drops(); len(ds) != 0 {
			t.Errorf("%s dropped %v, want nothing", name, ds)
		}
	}
}

func TestSpoofedSourceIsDroppedAndCounted(t *testing.T) {
	p := newPair(t, nil, nil)

	// Inner source 10.9.0.1 is outside A's allowed IPs at B (10.1.0.0/16).
	bufs := newBatch(3)
	bufs[0] = ipv4UDP(bufs[0], transport.Headroom, netip.MustParseAddr("10.9.0.1"), hostB, 200, 1)
	bufs[1] = ipv4UDP(bufs[1], transport.Headroom, hostA, hostB, 200, 2)
	bufs[2] = ipv4UDP(bufs[2], transport.Headroom, netip.MustParseAddr("10.2.0.1"), hostB, 200, 3)
	want := append([]byte(nil), bufs[1][transport.Headroom:]...)
	if err := p.a.Send(0, bufs, transport.Headroom); err != nil {
		t.Fatal(err)
	}
	p.cb.waitFor(t, 1)
	deadline := time.Now().Add(settle)
	for dropCount(p.b.Drops(), 0, ReasonSpoofedSource) < 2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	// Give a spoofed packet that was wrongly let through time to show up.
	time.Sleep(50 * time.Millisecond)
	got := p.cb.waitFor(t, 1)
	if len(got) != 1 || !bytes.Equal(got[0], want) {
		t.Fatalf("B received %d packets, want only the one with A's source", len(got))
	}
	if c := dropCount(p.b.Drops(), 0, ReasonSpoofedSource); c != 2 {
		t.Errorf("B counts %d spoofed_source drops for peer 0, want 2; all drops: %v", c, p.b.Drops())
	}
}

func TestWrongPublicKeyDeliversNothing(t *testing.T) {
	other, err := GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		mutateA func(*Config)
		mutateB func(*Config)
		// reason is bad_mac1 where the sender keyed mac1 with a wrong
		// key, and handshake_invalid where only the device can tell.
		reason string
	}{
		{"sender has a wrong key for the receiver", func(c *Config) { c.Peers[0].PublicKey = other.Public() }, nil, ReasonBadMAC1},
		{"receiver has a wrong key for the sender", nil, func(c *Config) { c.Peers[0].PublicKey = other.Public() }, ReasonHandshakeInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newPair(t, tt.mutateA, tt.mutateB)
			sendPackets(t, p.a, hostA, hostB, 4, 500, 1)
			deadline := time.Now().Add(settle)
			for dropCount(p.b.Drops(), transport.PeerAny, tt.reason) == 0 && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
			if c := dropCount(p.b.Drops(), transport.PeerAny, tt.reason); c == 0 {
				t.Errorf("B counted no %s drops; drops: %v", tt.reason, p.b.Drops())
			}
			time.Sleep(200 * time.Millisecond)
			if n := p.cb.count(); n != 0 {
				t.Errorf("B delivered %d packets from a peer with a wrong key", n)
			}
			st, err := p.a.Peers()
			if err != nil {
				t.Fatal(err)
			}
			if !st[0].LastHandshake.IsZero() {
				t.Errorf("A reports a handshake at %v with a wrong key", st[0].LastHandshake)
			}
		})
	}
}

func TestPeersReportsHandshakeAndBytes(t *testing.T) {
	p := newPair(t, nil, nil)
	before := time.Now().Add(-time.Second)
	sendPackets(t, p.a, hostA, hostB, 10, 1000, 1)
	p.cb.waitFor(t, 10)

	// The sender counts its bytes after the send returns, which may be
	// after the receiver has the packets.
	var st []PeerStatus
	for deadline := time.Now().Add(settle); ; time.Sleep(10 * time.Millisecond) {
		var err error
		if st, err = p.a.Peers(); err != nil {
			t.Fatal(err)
		}
		if len(st) != 1 || st[0].TxBytes >= 10*1000 || time.Now().After(deadline) {
			break
		}
	}
	if len(st) != 1 {
		t.Fatalf("Peers() has %d entries, want 1", len(st))
	}
	s := st[0]
	if s.PublicKey != p.keyB.Public() {
		t.Errorf("PublicKey = %v, want B's %v", s.PublicKey, p.keyB.Public())
	}
	if s.LastHandshake.Before(before) || s.LastHandshake.After(time.Now()) {
		t.Errorf("LastHandshake = %v, want about now", s.LastHandshake)
	}
	if s.TxBytes < 10*1000 {
		t.Errorf("TxBytes = %d, want at least the 10000 bytes sent", s.TxBytes)
	}
	if want := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), p.b.Port()); s.Endpoint != want {
		t.Errorf("Endpoint = %v, want %v", s.Endpoint, want)
	}

	stB, err := p.b.Peers()
	if err != nil {
		t.Fatal(err)
	}
	if stB[0].RxBytes < 10*1000 || !stB[0].Endpoint.IsValid() {
		t.Errorf("B's status of A = %+v; want the received bytes and a learned endpoint", stB[0])
	}
}

func TestCloseStopsDelivery(t *testing.T) {
	p := newPair(t, nil, nil)
	sendPackets(t, p.a, hostA, hostB, 1, 100, 0)
	p.cb.waitFor(t, 1)

	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		bufs := newBatch(32)
		for i := range bufs {
			bufs[i] = ipv4UDP(bufs[i], transport.Headroom, hostA, hostB, 1000, uint32(i))
		}
		for {
			select {
			case <-stop:
				return
			default:
			}
			if err := p.a.Send(0, bufs, transport.Headroom); err != nil {
				t.Errorf("Send on the open side: %v", err)
				return
			}
		}
	}()
	halt := sync.OnceFunc(func() {
		close(stop)
		<-done
	})
	defer halt()
	// Close while the flood is arriving.
	p.cb.waitFor(t, 1+32)
	if err := p.b.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	atClose := p.cb.count()
	time.Sleep(300 * time.Millisecond)
	halt()
	if n := p.cb.count(); n != atClose {
		t.Errorf("%d packets were delivered after Close returned", n-atClose)
	}
	if err := p.b.Send(0, newBatch(1), transport.Headroom); !errors.Is(err, transport.ErrClosed) {
		t.Errorf("Send after Close = %v, want transport.ErrClosed", err)
	}
	if err := p.b.Close(); err != nil {
		t.Errorf("second Close = %v, want nil", err)
	}

	// The port is free again once Close has returned.
	cfg := p.cfgB
	cfg.Port = p.b.Port()
	again, err := New(cfg, newCollector())
	if err != nil {
		t.Fatalf("New on the closed transport's port: %v", err)
	}
	again.Close()
}

func TestPortInUseIsEADDRINUSE(t *testing.T) {
	p := newPair(t, nil, nil)
	cfg := p.cfgB
	cfg.Port = p.b.Port()
	tr, err := New(cfg, newCollector())
	if err == nil {
		tr.Close()
		t.Fatal("New on a port in use succeeded")
	}
	if !errors.Is(err, syscall.EADDRINUSE) {
		t.Errorf("New on a port in use = %v; want an error that is syscall.EADDRINUSE", err)
	}
}

func TestOverheadFollowsEndpointFamily(t *testing.T) {
	priv, _ := GenerateKey()
	peerKey, _ := GenerateKey()
	tests := []struct {
		name     string
		endpoint string
		want     int
	}{
		{"no endpoint", "", 60},
		{"IPv4", "127.0.0.1:51820", 60},
		{"IPv4-mapped", "[::ffff:127.0.0.1]:51820", 60},
		{"IPv6", "[::1]:51820", 80},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			peer := Peer{PublicKey: peerKey.Public()}
			if tt.endpoint != "" {
				peer.Endpoint = netip.MustParseAddrPort(tt.endpoint)
			}
			tr, err := New(Config{PrivateKey: priv, Peers: []Peer{peer}}, newCollector())
			if err != nil {
				t.Fatal(err)
			}
			defer tr.Close()
			if got := tr.Overhead(); got != tt.want {
				t.Errorf("Overhead() = %d, want %d", got, tt.want)
			}
			if got := tr.BatchSize(); got != 128 {
				t.Errorf("BatchSize() = %d, want conn.IdealBatchSize (128)", got)
			}
		})
	}
}

func TestNewRefusesBadConfig(t *testing.T) {
	priv, _ := GenerateKey()
	k1, _ := GenerateKey()
	k2, _ := GenerateKey()
	good := func() Config {
		return Config{PrivateKey: priv, Peers: []Peer{
			{PublicKey: k1.Public(), AllowedIPs: []netip.Prefix{cidrA}},
			{PublicKey: k2.Public(), AllowedIPs: []netip.Prefix{cidrB}},
		}}
	}
	tests := []struct {
		name   string
		mutate func(*Config)
	}{
		{"no private key", func(c *Config) { c.PrivateKey = Key{} }},
		{"MTU too small", func(c *Config) { c.MTU = 100 }},
		{"MTU too large", func(c *Config) { c.MTU = 70000 }},
		{"UAPI name with a slash", func(c *Config) { c.UAPIName = "../x" }},
		{"peer without key", func(c *Config) { c.Peers[0].PublicKey = Key{} }},
		{"peer with our own key", func(c *Config) { c.Peers[0].PublicKey = priv.Public() }},
		{"two peers with one key", func(c *Config) { c.Peers[1].PublicKey = k1.Public() }},
		{"endpoint without port", func(c *Config) { c.Peers[0].Endpoint = netip.MustParseAddrPort("127.0.0.1:0") }},
		{"unspecified endpoint", func(c *Config) { c.Peers[0].Endpoint = netip.MustParseAddrPort("0.0.0.0:51820") }},
		{"negative keepalive", func(c *Config) { c.Peers[0].PersistentKeepalive = -1 }},
		{"invalid prefix", func(c *Config) { c.Peers[0].AllowedIPs = []netip.Prefix{{}} }},
		{"CIDR given to two peers", func(c *Config) { c.Peers[1].AllowedIPs = []netip.Prefix{netip.MustParsePrefix("10.1.3.4/16")} }},
	}
	if tr, err := New(good(), newCollector()); err != nil {
		t.Fatalf("New(good config) = %v", err)
	} else {
		tr.Close()
	}
	if _, err := New(good(), nil); err == nil {
		t.Errorf("New with a nil Deliverer succeeded")
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := good()
			tt.mutate(&cfg)
			tr, err := New(cfg, newCollector())
			if err == nil {
				tr.Close()
				t.Fatal("New succeeded, want an error naming the field")
			}
			t.Log(err)
		})
	}
}

// TestPersistentKeepaliveFollowsAReboundNATMapping puts A behind a NAT.
// When the NAT gives A's mapping a new port, then a new address, A's
// persistent keepalive alone, with no data to send, moves B's endpoint for
// A there (WireGuard roams to the source of the latest authenticated
// packet), and B's packets reach A again.
func TestPersistentKeepaliveFollowsAReboundNATMapping(t *testing.T) {
	var nat *transporttest.NAT
	p := newPair(t, func(c *Config) {
		nat = transporttest.NewNAT(t, c.Peers[0].Endpoint)
		c.Peers[0].Endpoint = nat.Inside()
		c.Peers[0].PersistentKeepalive = 1
	}, nil)
	sent := len(sendPackets(t, p.a, hostA, hostB, 4, 200, 1))
	p.cb.waitFor(t, sent)
	back := 0
	for i, to := range []netip.Addr{netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("127.0.0.2")} {
		nat.Rebind(t, to)
		deadline := time.Now().Add(settle)
		for {
			st, err := p.b.Peers()
			if err != nil {
				t.Fatal(err)
			}
			if st[0].Endpoint == nat.Outside() {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("rebinding %d: B still sends to %v, not the new mapping %v", i+1, st[0].Endpoint, nat.Outside())
			}
			time.Sleep(10 * time.Millisecond)
		}
		back += len(sendPackets(t, p.b, hostB, hostA, 4, 200, uint32(100*i)))
		p.ca.waitFor(t, back)
	}
}
