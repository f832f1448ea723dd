package esp

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/snorkel-net/snorkel/transport"
	"github.com/snorkel-net/snorkel/transport/esp/ike"
	"github.com/snorkel-net/snorkel/transport/internal/transporttest"
	"github.com/snorkel-net/snorkel/transport/udp"
	"github.com/snorkel-net/snorkel/transport/udp/udptest"
)

func TestConfigValidation(t *testing.T) {
	peer := []Peer{{Endpoint: netip.MustParseAddrPort("192.0.2.1:4500")}}
	tests := []struct {
		name string
		cfg  Config
		want string // substring of the error naming the field
	}{
		{"peer without address", Config{Peers: []Peer{{}}}, "Peers[0].Endpoint"},
		{"multicast peer", Config{Peers: []Peer{{Endpoint: netip.MustParseAddrPort("224.0.0.1:4500")}}}, "Peers[0].Endpoint"},
		{"unspecified peer", Config{Peers: []Peer{{Endpoint: netip.MustParseAddrPort("[::]:4500")}}}, "Peers[0].Endpoint"},
		{"two peers at one endpoint", Config{Peers: []Peer{
			{Endpoint: netip.MustParseAddrPort("192.0.2.1:4500")},
			{Endpoint: netip.MustParseAddrPort("192.0.2.1:0")},
		}}, "Peers[1].Endpoint"},
		{"negative keepalive interval", Config{Peers: peer, KeepaliveInterval: -time.Second}, "KeepaliveInterval"},
		{"keepalive interval of a microsecond", Config{Peers: peer, KeepaliveInterval: time.Microsecond}, "KeepaliveInterval"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := tt.cfg.validate()
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("validate() = %v, want an error naming %s", err, tt.want)
			}
		})
	}
	if _, err := (Config{}).validate(); err != nil {
		t.Fatalf("no peers: %v; want them allowed, SetPeer adds them later", err)
	}
	s, err := Config{Peers: []Peer{
		{Endpoint: netip.MustParseAddrPort("[::ffff:192.0.2.1]:0")},
		{Endpoint: netip.MustParseAddrPort("[2001:db8::1]:4501")},
	}}.validate()
	if err != nil {
		t.Fatal(err)
	}
	if s.port != DefaultPort || s.keepalive != DefaultKeepaliveInterval {
		t.Fatalf("defaults: port %d, keepalive %v", s.port, s.keepalive)
	}
	if got := s.endpoints[0]; got != netip.MustParseAddrPort("192.0.2.1:4500") {
		t.Fatalf("peer 0 endpoint %v: want unmapped, default port", got)
	}
}

func TestNewOnUsedPortWrapsEADDRINUSE(t *testing.T) {
	c, err := udp.Open(0)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	tr, err := New(Config{Port: c.Port(), Peers: []Peer{{Endpoint: local(9)}}}, discard{})
	if err == nil {
		tr.Close()
		t.Fatal("New on a used port succeeded")
	}
	if !errors.Is(err, syscall.EADDRINUSE) {
		t.Fatalf("New on a used port: %v does not wrap EADDRINUSE", err)
	}
}

func TestNewListensOnConfiguredPort(t *testing.T) {
	port := udptest.FreePort(t)
	tr, err := New(Config{Port: port, Peers: []Peer{{Endpoint: local(9)}}}, discard{})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	if tr.Port() != port {
		t.Fatalf("Port() = %d, want %d", tr.Port(), port)
	}
	if _, err := New(Config{Port: port, Peers: []Peer{{Endpoint: local(9)}}}, nil); err == nil {
		t.Fatal("New accepted a nil Deliverer")
	}
}

func TestInstallChildRefusesBadChildSA(t *testing.T) {
	tr := onFreePort(t, Config{Peers: []Peer{{Endpoint: local(9)}}}, discard{})
	good, _ := childPair(gcm128, 0, 0, 0x1000)
	if err := tr.InstallChild(good); err != nil {
		t.Fatal(err)
	}
	with := func(f func(c *ike.ChildSA)) ike.ChildSA {
		c, _ := childPair(gcm128, 0, 0, 0x2000)
		f(&c)
		return c
	}
	tests := []struct {
		name string
		c    ike.ChildSA
		want string
	}{
		{"no such peer", with(func(c *ike.ChildSA) { c.Peer = 1 }), "ChildSA.Peer"},
		{"negative peer", with(func(c *ike.ChildSA) { c.Peer = -1 }), "ChildSA.Peer"},
		{"inbound SPI 0", with(func(c *ike.ChildSA) { c.InSPI = 0 }), "ChildSA.InSPI"},
		{"outbound SPI reserved", with(func(c *ike.ChildSA) { c.OutSPI = 255 }), "ChildSA.OutSPI"},
		{"inbound SPI in use", with(func(c *ike.ChildSA) { c.InSPI = good.InSPI }), "ChildSA.InSPI"},
		{"unsupported cipher", with(func(c *ike.ChildSA) { c.Transform.Encr = 3 }), "ChildSA.Transform.Encr"},
		{"GCM with an integrity transform", with(func(c *ike.ChildSA) { c.Transform.Integ = ike.IntegHMACSHA256_128 }), "ChildSA.Transform.Integ"},
		{"CBC without integrity", with(func(c *ike.ChildSA) { c.Transform.Encr = ike.EncrAESCBC }), "ChildSA.Transform.Integ"},
		{"192-bit key", with(func(c *ike.ChildSA) { c.Transform.KeyBits = 192 }), "ChildSA.Transform.KeyBits"},
		{"GCM key without salt", with(func(c *ike.ChildSA) { c.In.Encr = c.In.Encr[:16] }), "ChildSA.In.Encr"},
		{"GCM with an integrity key", with(func(c *ike.ChildSA) { c.Out.Integ = make([]byte, 32) }), "ChildSA.Out.Integ"},
		{"CBC key with a salt", func() ike.ChildSA {
			c, _ := childPair(cbc128, 0, 0, 0x3000)
			c.Out.Encr = append(c.Out.Encr, 1, 2, 3, 4)
			return c
		}(), "ChildSA.Out.Encr"},
		{"CBC with a short integrity key", func() ike.ChildSA {
			c, _ := childPair(cbc256, 0, 0, 0x3000)
			c.In.Integ = c.In.Integ[:20]
			return c
		}(), "ChildSA.In.Integ"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tr.InstallChild(tt.c)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("InstallChild = %v, want an error naming %s", err, tt.want)
			}
		})
	}
	if st, ok := tr.Stats(0, good.InSPI); !ok || st != (ike.SAStats{}) {
		t.Fatalf("the installed CHILD_SA after refused ones: %+v, %v", st, ok)
	}
	tr.Close()
	if err := tr.InstallChild(with(func(*ike.ChildSA) {})); !errors.Is(err, transport.ErrClosed) {
		t.Fatalf("InstallChild after Close = %v, want ErrClosed", err)
	}
}

func TestSendErrors(t *testing.T) {
	tr := onFreePort(t, Config{Peers: []Peer{{Endpoint: local(9)}}}, discard{})
	pkt := [][]byte{withHeadroom(ipv4(ip4A, ip4B, nil))}
	if err := tr.Send(1, pkt, transport.Headroom); err == nil {
		t.Error("Send to peer 1 of 1 succeeded")
	}
	if err := tr.Send(0, pkt, sealHeadroom-1); err == nil {
		t.Error("Send with too little headroom succeeded")
	}
	if err := tr.Send(0, make([][]byte, udp.BatchSize+1), transport.Headroom); err == nil {
		t.Error("Send of an oversized batch succeeded")
	}
	tr.Close()
	if err := tr.Send(0, pkt, transport.Headroom); !errors.Is(err, transport.ErrClosed) {
		t.Errorf("Send after Close = %v, want ErrClosed", err)
	}
	if err := tr.SendIKE(local(9), []byte{1}); !errors.Is(err, transport.ErrClosed) {
		t.Errorf("SendIKE after Close = %v, want ErrClosed", err)
	}
}

// TestSendCountsWhatItCannotSend covers the drops of the send path: no SA
// yet, not IP, and the sequence numbers running out mid-batch.
func TestSendCountsWhatItCannotSend(t *testing.T) {
	sink, err := udp.Open(0)
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close()
	tr := onFreePort(t, Config{Peers: []Peer{{Endpoint: local(sink.Port())}}}, discard{})
	batch := func() [][]byte {
		return [][]byte{
			withHeadroom(ipv4(ip4A, ip4B, nil)),
			withHeadroom([]byte{0x10, 0, 0, 0}),
			withHeadroom(ipv6(ip6A, ip6B, nil)),
			make([]byte, transport.Headroom-1, transport.BufSize), // no packet at all
			withHeadroom(ipv4(ip4A, ip4B, nil)),
		}
	}
	if err := tr.Send(0, batch(), transport.Headroom); err != nil {
		t.Fatal(err)
	}
	c, _ := childPair(gcm128, 0, 0, 0x1000)
	if err := tr.InstallChild(c); err != nil {
		t.Fatal(err)
	}
	tr.peer(0).out.Load().seq.Store(1<<32 - 3)
	if err := tr.Send(0, batch(), transport.Headroom); err != nil {
		t.Fatal(err)
	}
	want := []transport.Drop{
		{Peer: 0, Reason: "no_sa", Count: 5},
		{Peer: 0, Reason: "seq_exhausted", Count: 1},
		{Peer: 0, Reason: "tx_not_ip", Count: 2},
	}
	if got := tr.Drops(); !slices.Equal(got, want) {
		t.Fatalf("Drops() = %v, want %v", got, want)
	}
	st, _ := tr.Stats(0, c.InSPI)
	if st.OutSeq != 1<<32-1 {
		t.Fatalf("OutSeq %#x, want %#x", st.OutSeq, uint64(1<<32-1))
	}
	if want := uint64(20 + 40); st.OutBytes != want {
		t.Fatalf("OutBytes %d, want %d", st.OutBytes, want)
	}
	if err := tr.Send(0, batch(), transport.Headroom); err != nil {
		t.Fatal(err)
	}
	if n := dropCount(tr.Drops(), 0, "seq_exhausted"); n != 1+3 {
		t.Fatalf("seq_exhausted %d after a whole batch past the limit, want 4", n)
	}
}

func TestOverhead(t *testing.T) {
	v4 := []Peer{{Endpoint: local(9)}}
	v6 := []Peer{{Endpoint: local(9)}, {Endpoint: netip.MustParseAddrPort("[::1]:9")}}
	tests := []struct {
		name  string
		peers []Peer
		tr    *ike.Transform
		want  int
	}{
		{"no SA, IPv4: the costliest suite", v4, nil, 20 + 8 + 8 + 16 + 15 + 2 + 16},
		{"AES-GCM over IPv4", v4, &gcm256, 20 + 8 + 8 + 8 + 3 + 2 + 16},
		{"AES-CBC over IPv4", v4, &cbc128, 20 + 8 + 8 + 16 + 15 + 2 + 16},
		{"AES-GCM with an IPv6 peer", v6, &gcm128, 40 + 8 + 8 + 8 + 3 + 2 + 16},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr := onFreePort(t, Config{Peers: tt.peers}, discard{})
			if tt.tr != nil {
				c, _ := childPair(*tt.tr, 0, 0, 0x1000)
				if err := tr.InstallChild(c); err != nil {
					t.Fatal(err)
				}
			}
			if got := tr.Overhead(); got != tt.want {
				t.Fatalf("Overhead() = %d, want %d", got, tt.want)
			}
		})
	}
}

// TestOverheadFitsMTU seals the largest packet Overhead allows under an
// underlay MTU and checks the datagram fits.
func TestOverheadFitsMTU(t *testing.T) {
	const mtu = 1500
	for _, sc := range suiteCases {
		tr := onFreePort(t, Config{Peers: []Peer{{Endpoint: local(9)}}}, discard{})
		c, _ := childPair(sc.tr, 0, 0, 0x1000)
		if err := tr.InstallChild(c); err != nil {
			t.Fatal(err)
		}
		for inner := mtu - tr.Overhead() - 20; inner <= mtu-tr.Overhead(); inner++ {
			o, _ := saPair(t, sc.tr, 0x1000)
			esp := sealed(t, o, ipv4(ip4A, ip4B, pattern(inner-20, 1)))
			if got := ipv4HeaderLen + udpHeaderLen + len(esp); got > mtu {
				t.Fatalf("%s: a %d-byte packet makes a %d-byte datagram, over the MTU of %d", sc.name, inner, got, mtu)
			}
		}
	}
}

// mirror is the outbound SA of the far side of c: it seals what c's
// inbound SA opens.
func mirror(t testing.TB, c ike.ChildSA) *outbound {
	t.Helper()
	s, err := newSuite(c.Transform, c.In, "In", true)
	if err != nil {
		t.Fatal(err)
	}
	return newOutbound(c.InSPI, s, c.Transform.ESN)
}

// datagrams is a receive batch as udp.Conn hands it over.
type datagrams struct {
	bufs  [][]byte
	sizes []int
	srcs  []netip.AddrPort
}

func (d *datagrams) add(b []byte, src netip.AddrPort) {
	d.bufs = append(d.bufs, socketBuf(b))
	d.sizes = append(d.sizes, len(b))
	d.srcs = append(d.srcs, src)
}

// TestReceiveDropsByReason feeds the receive handler datagrams directly
// and checks each lands in its counter, with the good ones delivered.
func TestReceiveDropsByReason(t *testing.T) {
	for _, sc := range suiteCases {
		t.Run(sc.name, func(t *testing.T) {
			peerAddr, stranger := local(4000), netip.MustParseAddrPort("127.0.0.2:4000")
			rec := newRecorder(t)
			tr := onFreePort(t, Config{Peers: []Peer{{Endpoint: peerAddr}}}, rec)
			c, _ := childPair(sc.tr, 0, 0, 0x1000)
			if err := tr.InstallChild(c); err != nil {
				t.Fatal(err)
			}
			far := mirror(t, c)
			pkt := ipv4(ip4A, ip4B, pattern(50, 2))
			good := sealed(t, far, pkt)
			forged := sealed(t, far, pkt)
			forged[len(forged)-1] ^= 1
			seq, _ := far.reserve(4)
			badPad := craft(far, pkt, nextIPv4, seq, func(p []byte) { p[len(p)-2] = 200 })
			dummy := craft(far, pkt, 59, seq+1, func([]byte) {})
			mismatch := craft(far, ipv6(ip6A, ip6B, nil), nextIPv4, seq+2, func([]byte) {})
			unknown := bytes.Clone(good)
			binary.BigEndian.PutUint32(unknown, 0x9999)

			var d datagrams
			d.add(good, peerAddr)
			d.add(good, peerAddr)
			d.add(forged, peerAddr)
			d.add(badPad, peerAddr)
			d.add(dummy, peerAddr)
			d.add(mismatch, peerAddr)
			d.add(good[:espHeaderLen+8], peerAddr)
			d.add(unknown, peerAddr)
			d.add([]byte{1, 2, 3}, stranger)
			d.add([]byte{keepaliveByte}, peerAddr)
			d.add([]byte{keepaliveByte}, stranger)
			d.add([]byte{0, 0, 0, 0, 0x2a}, peerAddr)
			d.add(sealed(t, far, pkt), stranger)
			before := tr.now.Load()
			tr.receive(d.bufs, d.sizes, d.srcs)

			want := []transport.Drop{
				{Peer: transport.PeerAny, Reason: "truncated", Count: 1},
				{Peer: transport.PeerAny, Reason: "unknown_spi", Count: 1},
				{Peer: transport.PeerAny, Reason: "keepalive", Count: 1},
				{Peer: 0, Reason: "truncated", Count: 1},
				{Peer: 0, Reason: "replay", Count: 1},
				{Peer: 0, Reason: "auth_failed", Count: 1},
				{Peer: 0, Reason: "bad_padding", Count: 1},
				{Peer: 0, Reason: "not_ip", Count: 2},
				{Peer: 0, Reason: "ike_unhandled", Count: 1},
				{Peer: 0, Reason: "keepalive", Count: 1},
			}
			if got := tr.Drops(); !slices.Equal(got, want) {
				t.Fatalf("Drops() =\n%v\nwant\n%v", got, want)
			}
			pkts, peers := rec.take()
			if len(pkts) != 2 || !bytes.Equal(pkts[0], pkt) || !bytes.Equal(pkts[1], pkt) || peers[0] != 0 || peers[1] != 0 {
				t.Fatalf("delivered %d packets to peers %v, want the two good ones to peer 0", len(pkts), peers)
			}
			if m := tr.Moved(0); m != 1 {
				t.Fatalf("Moved(0) = %d, want 1 for the packet from another address", m)
			}
			st, _ := tr.Stats(0, c.InSPI)
			if st.InBytes != uint64(2*len(pkt)) || st.LastIn < before || st.LastIn > tr.now.Load() {
				t.Fatalf("Stats %+v: want InBytes %d and LastIn the coarse clock, %d or later", st, 2*len(pkt), before)
			}
		})
	}
}

// TestReceiveGroupsByPeerInOrder checks that an interleaved batch reaches
// the Deliverer as one call per peer, each in arrival order.
func TestReceiveGroupsByPeerInOrder(t *testing.T) {
	calls := &callLog{}
	tr := onFreePort(t, Config{Peers: []Peer{{Endpoint: local(4000)}, {Endpoint: local(4001)}}}, calls)
	var far [2]*outbound
	for p := range far {
		c, _ := childPair(gcm128, p, 0, 0x1000*uint32(p+1))
		if err := tr.InstallChild(c); err != nil {
			t.Fatal(err)
		}
		far[p] = mirror(t, c)
	}
	var d datagrams
	for i, p := range []int{1, 0, 1, 1, 0} {
		d.add(sealed(t, far[p], numbered(uint32(i), 40)), local(uint16(4000+p)))
	}
	tr.receive(d.bufs, d.sizes, d.srcs)
	want := []string{"peer 1: 0 2 3", "peer 0: 1 4"}
	if !slices.Equal(calls.calls, want) {
		t.Fatalf("Deliver calls %q, want %q", calls.calls, want)
	}
}

// TestReceiveOpensCoalescedSegmentsInPlace hands receive a coalesced
// datagram as udp.Conn does, its segments end to end in one
// buffer, and checks that every inner packet arrives whole: opening a
// segment must write nothing into the one before it, whose inner packet is
// delivered after the whole batch is opened.
func TestReceiveOpensCoalescedSegmentsInPlace(t *testing.T) {
	for _, sc := range suiteCases {
		for _, esn := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/esn=%v", sc.name, esn), func(t *testing.T) {
				rec := newRecorder(t)
				tr := onFreePort(t, Config{Peers: []Peer{{Endpoint: local(4000)}}}, rec)
				c, _ := childPair(withESN(sc.tr, esn), 0, 0, 0x1000)
				if err := tr.InstallChild(c); err != nil {
					t.Fatal(err)
				}
				far := mirror(t, c)
				const segs = 5
				var want, esps [][]byte
				for i := range segs {
					want = append(want, numbered(uint32(i), 1000))
					esps = append(esps, sealed(t, far, want[i]))
				}
				seg := len(esps[0])
				gro := make([]byte, transport.BufSize)
				var d datagrams
				for i, e := range esps {
					copy(gro[rxOffset+i*seg:], e)
					d.bufs = append(d.bufs, gro[i*seg:])
					d.sizes = append(d.sizes, len(e))
					d.srcs = append(d.srcs, local(4000))
				}
				tr.receive(d.bufs, d.sizes, d.srcs)
				if len(rec.pkts) != segs {
					t.Fatalf("%d packets delivered, want %d (drops %v)", len(rec.pkts), segs, tr.Drops())
				}
				for i, p := range rec.pkts {
					if !bytes.Equal(p, want[i]) {
						t.Errorf("packet %d changed: its last bytes are %x, want %x", i, p[len(p)-8:], want[i][len(want[i])-8:])
					}
				}
			})
		}
	}
}

type callLog struct{ calls []string }

func (c *callLog) Deliver(peer int, bufs [][]byte, offset int) {
	s := "peer " + string(rune('0'+peer)) + ":"
	for _, b := range bufs {
		s += " " + string(rune('0'+binary.BigEndian.Uint32(b[offset+20:])))
	}
	c.calls = append(c.calls, s)
}

func TestSendAndReceiveAllocateNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("skipping: the race detector makes sync.Pool drop items, so pooled paths allocate")
	}
	for _, sc := range suiteCases {
		sink, err := udp.Open(0)
		if err != nil {
			t.Fatal(err)
		}
		defer sink.Close()
		tr := onFreePort(t, Config{Peers: []Peer{{Endpoint: local(sink.Port())}}}, discard{})
		c, _ := childPair(sc.tr, 0, 0, 0x1000)
		if err := tr.InstallChild(c); err != nil {
			t.Fatal(err)
		}
		pkt := ipv4(ip4A, ip4B, pattern(1000, 7))
		bufs := make([][]byte, 32)
		for i := range bufs {
			bufs[i] = withHeadroom(pkt)
		}
		if n := transporttest.FewestAllocs(100, func() {
			for i := range bufs {
				bufs[i] = bufs[i][:transport.Headroom+len(pkt)]
			}
			if err := tr.Send(0, bufs, transport.Headroom); err != nil {
				t.Fatal(err)
			}
		}); n != 0 {
			t.Errorf("%s: Send allocates %v times per batch, want 0", sc.name, n)
		}

		far := mirror(t, c)
		var d datagrams
		for range 32 {
			d.add(sealed(t, far, pkt), local(sink.Port()))
		}
		d.add([]byte{keepaliveByte}, local(sink.Port()))
		full := make([][]byte, len(d.bufs))
		for i := range full {
			full[i] = bytes.Clone(d.bufs[i])
		}
		sa := (*tr.inbound.Load())[c.InSPI]
		bufs = make([][]byte, len(d.bufs))
		if n := transporttest.FewestAllocs(100, func() {
			for i := range bufs {
				bufs[i] = d.bufs[i]
				copy(bufs[i], full[i])
			}
			sa.win.reset(0)
			tr.receive(bufs, d.sizes, d.srcs)
		}); n != 0 {
			t.Errorf("%s: receive allocates %v times per batch, want 0", sc.name, n)
		}
		if st, _ := tr.Stats(0, c.InSPI); st.InBytes == 0 {
			t.Fatalf("%s: nothing opened", sc.name)
		}
	}
}

// pair is two transports on 127.0.0.1: a has peers [a stranger, b], so
// that b is a's peer 1, and b has peers [a].
type pair struct {
	a, b       *Transport
	recA, recB *recorder
}

func newPair(t *testing.T, keepalive time.Duration) *pair {
	p := &pair{recA: newRecorder(t), recB: newRecorder(t)}
	p.a = onFreePort(t, Config{KeepaliveInterval: keepalive, Peers: []Peer{
		{Endpoint: netip.MustParseAddrPort("127.0.0.2:9")},
		{Endpoint: local(1)}, // b, once its port is known
	}}, p.recA)
	p.b = onFreePort(t, Config{KeepaliveInterval: keepalive, Peers: []Peer{{Endpoint: local(p.a.Port())}}}, p.recB)
	if err := p.a.SetEndpoint(1, local(p.b.Port())); err != nil {
		t.Fatal(err)
	}
	return p
}

// install installs a mirrored CHILD_SA pair, b's side first so that b
// accepts before a sends with it.
func (p *pair) install(t *testing.T, tr ike.Transform, base uint32) (a, b ike.ChildSA) {
	t.Helper()
	a, b = childPair(tr, 1, 0, base)
	if err := p.b.InstallChild(b); err != nil {
		t.Fatal(err)
	}
	if err := p.a.InstallChild(a); err != nil {
		t.Fatal(err)
	}
	return a, b
}

func batchOf(n int, v6 bool, seed byte) (bufs, want [][]byte) {
	for i := range n {
		var p []byte
		if v6 {
			p = ipv6(ip6A, ip6B, pattern(1200, seed+byte(i)))
		} else {
			p = ipv4(ip4A, ip4B, pattern(1200, seed+byte(i)))
		}
		bufs, want = append(bufs, withHeadroom(p)), append(want, p)
	}
	return bufs, want
}

func checkDelivered(t *testing.T, rec *recorder, want [][]byte, peer int) {
	t.Helper()
	rec.wait(t, len(want))
	pkts, peers := rec.take()
	if len(pkts) != len(want) {
		t.Fatalf("delivered %d packets, want %d", len(pkts), len(want))
	}
	for i := range want {
		if !bytes.Equal(pkts[i], want[i]) || peers[i] != peer {
			t.Fatalf("packet %d from peer %d: %d bytes; want %d bytes from peer %d", i, peers[i], len(pkts[i]), len(want[i]), peer)
		}
	}
}

// TestTwoTransportsExchangeBatches runs two transports on 127.0.0.1 with
// mirrored CHILD_SAs and sends batches both ways, checking every byte and
// the peer index each side delivers with.
func TestTwoTransportsExchangeBatches(t *testing.T) {
	for _, sc := range suiteCases {
		t.Run(sc.name, func(t *testing.T) {
			p := newPair(t, 0)
			ca, cb := p.install(t, withESN(sc.tr, true), 0x1000)

			bufs, want := batchOf(64, false, 1)
			if err := p.a.Send(1, bufs, transport.Headroom); err != nil {
				t.Fatal(err)
			}
			checkDelivered(t, p.recB, want, 0)

			bufs, want = batchOf(udp.BatchSize, true, 50)
			if err := p.b.Send(0, bufs, transport.Headroom); err != nil {
				t.Fatal(err)
			}
			checkDelivered(t, p.recA, want, 1)

			if d := append(p.a.Drops(), p.b.Drops()...); len(d) != 0 {
				t.Fatalf("drops: %v", d)
			}
			sa, _ := p.a.Stats(1, ca.InSPI)
			sb, _ := p.b.Stats(0, cb.InSPI)
			if sa.OutSeq != 64 || sb.OutSeq != udp.BatchSize || sa.OutBytes != sb.InBytes || sb.OutBytes != sa.InBytes || sa.LastIn == 0 {
				t.Fatalf("stats of a %+v and b %+v disagree", sa, sb)
			}
			if p.a.Moved(1) != 0 || p.b.Moved(0) != 0 {
				t.Fatal("packets from the peers' own endpoints counted as moved")
			}
		})
	}
}

// TestRekeyMakeBeforeBreakLosesNothing rekeys while a sender goroutine
// keeps sending numbered packets, and checks every one arrives once, in
// order, under the old SA before the switch and the new one after.
func TestRekeyMakeBeforeBreakLosesNothing(t *testing.T) {
	p := newPair(t, 0)
	oldA, oldB := p.install(t, gcm128, 0x1000)

	// The sender runs until told to stop, not for a fixed number of
	// batches: however the scheduler favours it over this goroutine, it is
	// still sending when the rekey happens.
	const size = 16
	var sent atomic.Int64 // batches delivered whole
	stop, exited := make(chan struct{}), make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		defer close(exited)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			bufs := make([][]byte, size)
			for j := range bufs {
				bufs[j] = withHeadroom(numbered(uint32(i*size+j), 200))
			}
			if err := p.a.Send(1, bufs, transport.Headroom); err != nil {
				t.Error(err)
				return
			}
			// Wait for the batch to arrive so that the socket buffer
			// never overflows: loss here can only be the rekey's.
			for deadline := time.Now().Add(settle); p.recB.count() < (i+1)*size; {
				if time.Now().After(deadline) {
					t.Errorf("batch %d: %d of %d packets arrived", i, p.recB.count(), (i+1)*size)
					return
				}
				time.Sleep(50 * time.Microsecond)
			}
			sent.Store(int64(i + 1))
		}
	})
	halt := sync.OnceFunc(func() {
		close(stop)
		wg.Wait()
	})
	defer halt()
	waitSent := func(n int64) {
		t.Helper()
		eventually(t, fmt.Sprintf("%d batches sent", n), func() bool {
			select {
			case <-exited:
				return true
			default:
				return sent.Load() >= n
			}
		})
		if sent.Load() < n {
			t.FailNow() // the sender gave up and said why
		}
	}
	waitSent(20)
	newA, newB := p.install(t, cbc256, 0x2000)
	// Every packet sealed with the old SA is delivered before the
	// sender's next batch; two batches on, none is left in flight.
	mark := p.recB.count()
	eventually(t, "three batches after the switch", func() bool { return p.recB.count() >= mark+3*size })
	p.b.DeleteChild(0, oldB.InSPI)
	p.a.DeleteChild(1, oldA.InSPI)
	waitSent(sent.Load() + 20)
	halt()
	if t.Failed() {
		return
	}
	batches := int(sent.Load())

	pkts, _ := p.recB.take()
	if len(pkts) != batches*size {
		t.Fatalf("delivered %d packets, want %d", len(pkts), batches*size)
	}
	for i, pkt := range pkts {
		if n := binary.BigEndian.Uint32(pkt[20:]); n != uint32(i) {
			t.Fatalf("packet %d is number %d", i, n)
		}
	}
	if d := append(p.a.Drops(), p.b.Drops()...); len(d) != 0 {
		t.Fatalf("drops: %v", d)
	}
	if _, ok := p.b.Stats(0, oldB.InSPI); ok {
		t.Fatal("the old CHILD_SA is still installed")
	}
	st, _ := p.b.Stats(0, newB.InSPI)
	if st.InBytes == 0 || st.InBytes >= uint64(batches*size*200) {
		t.Fatalf("new SA opened %d bytes: want some, not all", st.InBytes)
	}
	if st, _ := p.a.Stats(1, newA.InSPI); st.OutBytes != st.OutSeq*200 {
		t.Fatalf("new outbound SA: %+v", st)
	}
}

func TestDeleteChildFallsBackToNewestRemaining(t *testing.T) {
	tr := onFreePort(t, Config{Peers: []Peer{{Endpoint: local(9)}, {Endpoint: local(10)}}}, discard{})
	var cs []ike.ChildSA
	for i, base := range []uint32{0x1000, 0x2000, 0x3000} {
		c, _ := childPair(gcm128, 0, 0, base)
		if i == 1 {
			c.Peer = 1
		}
		if err := tr.InstallChild(c); err != nil {
			t.Fatal(err)
		}
		cs = append(cs, c)
	}
	out := func(peer int) uint32 {
		if o := tr.peer(peer).out.Load(); o != nil {
			return o.spi
		}
		return 0
	}
	if out(0) != cs[2].OutSPI || out(1) != cs[1].OutSPI {
		t.Fatalf("outbound SPIs %#x, %#x; want the newest of each peer", out(0), out(1))
	}
	tr.DeleteChild(1, cs[0].InSPI) // the wrong peer: nothing happens
	if _, ok := tr.Stats(0, cs[0].InSPI); !ok {
		t.Fatal("DeleteChild with the wrong peer deleted")
	}
	tr.DeleteChild(0, cs[2].InSPI)
	if out(0) != cs[0].OutSPI {
		t.Fatalf("after deleting peer 0's newest, outbound SPI %#x, want %#x", out(0), cs[0].OutSPI)
	}
	tr.DeleteChild(0, cs[0].InSPI)
	if out(0) != 0 || out(1) != cs[1].OutSPI {
		t.Fatalf("after deleting all of peer 0's: outbound SPIs %#x, %#x", out(0), out(1))
	}
	if len(*tr.inbound.Load()) != 1 {
		t.Fatalf("inbound map has %d SAs, want 1", len(*tr.inbound.Load()))
	}
}

// TestIKEMessagesPassTheMarkerDemux sends IKE messages both ways through
// SendIKE and checks the handlers get them whole, marker stripped.
func TestIKEMessagesPassTheMarkerDemux(t *testing.T) {
	p := newPair(t, 0)
	type msg struct {
		from netip.AddrPort
		data []byte
	}
	got := make(chan msg, 2)
	handler := func(from netip.AddrPort, m []byte) { got <- msg{from, bytes.Clone(m)} }
	p.a.SetIKEHandler(handler)
	p.b.SetIKEHandler(handler)
	// An IKE_SA_INIT-like header: SPIs, next payload, version, exchange.
	m := append(pattern(16, 9), 33, 0x20, 34, 0x08, 0, 0, 0, 0)
	if err := p.a.SendIKE(local(p.b.Port()), m); err != nil {
		t.Fatal(err)
	}
	if err := p.b.SendIKE(local(p.a.Port()), m[:9]); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		select {
		case g := <-got:
			want, from := m, local(p.a.Port())
			if g.from.Port() == p.b.Port() {
				want, from = m[:9], local(p.b.Port())
			}
			if g.from != from || !bytes.Equal(g.data, want) {
				t.Fatalf("IKE message from %v: % x; want from %v: % x", g.from, g.data, from, want)
			}
		case <-time.After(settle):
			t.Fatal("IKE message did not arrive")
		}
	}
	if err := p.a.SendIKE(netip.AddrPort{}, m); err == nil {
		t.Fatal("SendIKE to no address succeeded")
	}
	if d := append(p.a.Drops(), p.b.Drops()...); len(d) != 0 {
		t.Fatalf("drops: %v", d)
	}
}

func TestKeepalivesArriveAndAreCounted(t *testing.T) {
	p := newPair(t, 20*time.Millisecond)
	time.Sleep(100 * time.Millisecond)
	if d := append(p.a.Drops(), p.b.Drops()...); len(d) != 0 {
		t.Fatalf("keepalives before any SA: %v", d)
	}
	p.install(t, gcm128, 0x1000)
	eventually(t, "keepalives both ways", func() bool {
		return dropCount(p.b.Drops(), 0, "keepalive") >= 2 && dropCount(p.a.Drops(), 1, "keepalive") >= 2
	})
	if p.recA.count()+p.recB.count() != 0 {
		t.Fatal("a keepalive was delivered")
	}
}

func TestSetEndpoint(t *testing.T) {
	tr := onFreePort(t, Config{Peers: []Peer{{Endpoint: local(9)}}}, discard{})
	if err := tr.SetEndpoint(0, netip.MustParseAddrPort("[::ffff:127.0.0.1]:0")); err != nil {
		t.Fatal(err)
	}
	if got := *tr.peer(0).endpoint.Load(); got != local(tr.Port()) {
		t.Fatalf("endpoint %v, want unmapped with the local port %d", got, tr.Port())
	}
	if err := tr.SetEndpoint(1, local(9)); err == nil {
		t.Fatal("SetEndpoint of peer 1 of 1 succeeded")
	}
	if err := tr.SetEndpoint(0, netip.AddrPort{}); err == nil {
		t.Fatal("SetEndpoint to no address succeeded")
	}
}

// TestDeferredInstallWaitsForThePeer installs a rekeyed CHILD_SA on the
// responder's side first, Deferred: the responder keeps sending on the old
// SA, which the initiator can open, until a packet arrives on the new one,
// and then sends on the new one.
func TestDeferredInstallWaitsForThePeer(t *testing.T) {
	p := newPair(t, 0)
	p.install(t, gcm128, 0x1000)
	a2, b2 := childPair(gcm256, 1, 0, 0x2000)
	b2.Deferred = true
	if err := p.b.InstallChild(b2); err != nil {
		t.Fatal(err)
	}
	outSPI := func() uint32 { return p.b.peer(0).out.Load().spi }
	if got := outSPI(); got == b2.OutSPI {
		t.Fatalf("b sends on the deferred SA %#x before a has it", got)
	}
	bufs, want := batchOf(3, false, 1)
	if err := p.b.Send(0, bufs, transport.Headroom); err != nil {
		t.Fatal(err)
	}
	checkDelivered(t, p.recA, want, 1) // a has only the old SA: it opens them

	if err := p.a.InstallChild(a2); err != nil {
		t.Fatal(err)
	}
	bufs, want = batchOf(2, false, 7)
	if err := p.a.Send(1, bufs, transport.Headroom); err != nil {
		t.Fatal(err)
	}
	checkDelivered(t, p.recB, want, 0)
	eventually(t, "b to send on the new SA", func() bool { return outSPI() == b2.OutSPI })
}

// TestDeletingTheCurrentSAPromotesADeferredOne: once the old CHILD_SA is
// deleted, a Deferred one takes over sending even if nothing arrived on it.
func TestDeletingTheCurrentSAPromotesADeferredOne(t *testing.T) {
	tr := onFreePort(t, Config{Peers: []Peer{{Endpoint: local(9)}}}, discard{})
	old, _ := childPair(gcm128, 0, 0, 0x1000)
	next, _ := childPair(gcm128, 0, 0, 0x2000)
	next.Deferred = true
	for _, c := range []ike.ChildSA{old, next} {
		if err := tr.InstallChild(c); err != nil {
			t.Fatal(err)
		}
	}
	if got := tr.peer(0).out.Load().spi; got != old.OutSPI {
		t.Fatalf("outbound SPI %#x, want the old %#x while the new one is deferred", got, old.OutSPI)
	}
	tr.DeleteChild(0, old.InSPI)
	if got := tr.peer(0).out.Load().spi; got != next.OutSPI {
		t.Fatalf("after deleting the old SA, outbound SPI %#x, want %#x", got, next.OutSPI)
	}
	if tr.children[next.InSPI].in.pending.Load() != nil {
		t.Fatal("the promoted SA is still marked pending")
	}
}
