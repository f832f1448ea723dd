package wireguard

import (
	"encoding/binary"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/snorkel-net/snorkel/transport"
)

var (
	cidrA = netip.MustParsePrefix("10.1.0.0/16")
	cidrB = netip.MustParsePrefix("10.2.0.0/16")
)

// settle bounds a wait for something that takes milliseconds on an idle
// machine (a handshake, packets over loopback, a counter update): go test
// runs packages in parallel, and on a loaded 2-core machine such waits
// stretch by orders of magnitude. Running out fails the test, so it is far
// beyond the normal time.
const settle = 60 * time.Second

// collector is a Deliverer that keeps a copy of every packet.
type collector struct {
	mu      sync.Mutex
	pkts    [][]byte
	peers   []int
	arrived chan struct{}
}

func newCollector() *collector {
	return &collector{arrived: make(chan struct{}, 1)}
}

func (c *collector) Deliver(peer int, bufs [][]byte, offset int) {
	c.mu.Lock()
	for _, b := range bufs {
		c.pkts = append(c.pkts, append([]byte(nil), b[offset:]...))
		c.peers = append(c.peers, peer)
	}
	c.mu.Unlock()
	select {
	case c.arrived <- struct{}{}:
	default:
	}
}

func (c *collector) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.pkts)
}

// waitFor waits until at least n packets have arrived and returns a copy.
func (c *collector) waitFor(t *testing.T, n int) [][]byte {
	t.Helper()
	deadline := time.After(settle)
	for {
		c.mu.Lock()
		if len(c.pkts) >= n {
			out := append([][]byte(nil), c.pkts...)
			c.mu.Unlock()
			return out
		}
		have := len(c.pkts)
		c.mu.Unlock()
		select {
		case <-c.arrived:
		case <-deadline:
			t.Fatalf("%d packets arrived within %v, want %d", have, settle, n)
		}
	}
}

// ipv4UDP builds an IPv4/UDP packet of size bytes in buf[offset:] whose
// payload starts with seq and is otherwise filled from seq.
func ipv4UDP(buf []byte, offset int, src, dst netip.Addr, size int, seq uint32) []byte {
	p := buf[offset : offset+size]
	clear(p[:28])
	p[0] = 0x45
	binary.BigEndian.PutUint16(p[2:], uint16(size))
	p[8] = 64
	p[9] = 17
	s, d := src.As4(), dst.As4()
	copy(p[12:16], s[:])
	copy(p[16:20], d[:])
	binary.BigEndian.PutUint16(p[20:], 40000)
	binary.BigEndian.PutUint16(p[22:], 9)
	binary.BigEndian.PutUint16(p[24:], uint16(size-20))
	binary.BigEndian.PutUint32(p[28:], seq)
	for i := 32; i < size; i++ {
		p[i] = byte(seq) + byte(i)
	}
	return buf[:offset+size]
}

func newBatch(n int) [][]byte {
	bufs := make([][]byte, n)
	for i := range bufs {
		bufs[i] = make([]byte, transport.BufSize)
	}
	return bufs
}

// pair is two Transports on 127.0.0.1. B is created first with no endpoint
// for A, so B learns A's address from A's first handshake.
type pair struct {
	a, b       *Transport
	ca, cb     *collector
	keyA, keyB Key
	cfgA, cfgB Config
}

func newPair(t testing.TB, mutateA, mutateB func(*Config)) *pair {
	t.Helper()
	p := &pair{ca: newCollector(), cb: newCollector()}
	var err error
	if p.keyA, err = GenerateKey(); err != nil {
		t.Fatal(err)
	}
	if p.keyB, err = GenerateKey(); err != nil {
		t.Fatal(err)
	}
	p.cfgB = Config{
		PrivateKey: p.keyB,
		Peers:      []Peer{{PublicKey: p.keyA.Public(), AllowedIPs: []netip.Prefix{cidrA}}},
	}
	if mutateB != nil {
		mutateB(&p.cfgB)
	}
	if p.b, err = New(p.cfgB, p.cb); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.b.Close() })
	p.cfgA = Config{
		PrivateKey: p.keyA,
		Peers: []Peer{{
			PublicKey:  p.keyB.Public(),
			Endpoint:   netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), p.b.Port()),
			AllowedIPs: []netip.Prefix{cidrB},
		}},
	}
	if mutateA != nil {
		mutateA(&p.cfgA)
	}
	if p.a, err = New(p.cfgA, p.ca); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.a.Close() })
	return p
}

// dropCount returns the count for peer and reason in ds.
func dropCount(ds []transport.Drop, peer int, reason string) uint64 {
	for _, d := range ds {
		if d.Peer == peer && d.Reason == reason {
			return d.Count
		}
	}
	return 0
}
