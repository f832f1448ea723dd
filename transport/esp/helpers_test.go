package esp

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/snorkel-net/snorkel/packet"
	"github.com/snorkel-net/snorkel/transport"
	"github.com/snorkel-net/snorkel/transport/esp/ike"
)

var (
	ip4A = netip.MustParseAddr("198.19.1.1")
	ip4B = netip.MustParseAddr("198.19.2.7")
	ip6A = netip.MustParseAddr("2001:db8::1")
	ip6B = netip.MustParseAddr("2001:db8::2")
)

// settle bounds a wait for something that takes milliseconds on an idle
// machine (packets over loopback, a keepalive): go test runs packages in
// parallel, and on a loaded 2-core machine such waits stretch by orders of
// magnitude. Running out fails the test, so it is far beyond the normal time.
const settle = 60 * time.Second

// suiteCase is a transform the tests and benchmarks run over.
type suiteCase struct {
	name string
	tr   ike.Transform
}

var (
	gcm128 = ike.Transform{Encr: ike.EncrAESGCM16, KeyBits: 128}
	gcm256 = ike.Transform{Encr: ike.EncrAESGCM16, KeyBits: 256}
	cbc128 = ike.Transform{Encr: ike.EncrAESCBC, KeyBits: 128, Integ: ike.IntegHMACSHA256_128}
	cbc256 = ike.Transform{Encr: ike.EncrAESCBC, KeyBits: 256, Integ: ike.IntegHMACSHA256_128}
)

var suiteCases = []suiteCase{
	{"aes128gcm16", gcm128},
	{"aes256gcm16", gcm256},
	{"aes128-cbc+hmac-sha256", cbc128},
	{"aes256-cbc+hmac-sha256", cbc256},
}

func withESN(tr ike.Transform, esn bool) ike.Transform {
	tr.ESN = esn
	return tr
}

// keysFor returns keys of the right lengths for tr, filled from seed.
func keysFor(tr ike.Transform, seed byte) ike.Keys {
	n := tr.KeyBits / 8
	if tr.Encr == ike.EncrAESGCM16 {
		return ike.Keys{Encr: pattern(n+gcmSaltLen, seed)}
	}
	return ike.Keys{Encr: pattern(n, seed), Integ: pattern(hmacKeyLen, seed+100)}
}

// childPair returns the two mirrored CHILD_SAs of gateways a and b, each
// naming the other as peer, with SPIs derived from base.
func childPair(tr ike.Transform, peerOfB, peerOfA int, base uint32) (a, b ike.ChildSA) {
	ab, ba := keysFor(tr, byte(base)), keysFor(tr, byte(base)+50)
	a = ike.ChildSA{Peer: peerOfB, InSPI: base + 1, OutSPI: base + 2, Transform: tr, In: ba, Out: ab}
	b = ike.ChildSA{Peer: peerOfA, InSPI: base + 2, OutSPI: base + 1, Transform: tr, In: ab, Out: ba}
	return a, b
}

// saPair returns an outbound SA and the inbound SA that opens what it seals.
func saPair(t testing.TB, tr ike.Transform, spi uint32) (*outbound, *inbound) {
	t.Helper()
	k := keysFor(tr, byte(spi))
	out, err := newSuite(tr, k, "Out", true)
	if err != nil {
		t.Fatal(err)
	}
	in, err := newSuite(tr, k, "In", false)
	if err != nil {
		t.Fatal(err)
	}
	return newOutbound(spi, out, tr.ESN), newInbound(spi, 0, in, tr.ESN)
}

// sealed seals pkt under o with the next sequence number and returns a copy
// of the ESP packet.
func sealed(t testing.TB, o *outbound, pkt []byte) []byte {
	t.Helper()
	seq, n := o.reserve(1)
	if n != 1 {
		t.Fatal("sequence numbers exhausted")
	}
	b := withHeadroom(pkt)
	esp, r := o.seal(b, transport.Headroom, nextHeaderOf(pkt, 0), seq)
	if r != accepted {
		t.Fatalf("seal: %v", r)
	}
	return bytes.Clone(esp)
}

// opened opens a copy of esp under in, placed as the socket places a
// datagram, and returns a copy of the inner packet.
func opened(in *inbound, esp []byte) ([]byte, byte, reason) {
	b := socketBuf(esp)
	n, next, r := in.open(b[:rxOffset+len(esp)], rxOffset, new(scratch))
	if r != accepted {
		return nil, 0, r
	}
	at := rxOffset + in.headerLen()
	return bytes.Clone(b[at : at+n]), next, accepted
}

func unhex(s string) []byte {
	b, err := hex.DecodeString(strings.Join(strings.Fields(s), ""))
	if err != nil {
		panic(err)
	}
	return b
}

func pattern(n int, seed byte) []byte {
	p := make([]byte, n)
	for i := range p {
		p[i] = seed + byte(i*7)
	}
	return p
}

func checksum(b []byte) uint16 { return ^packet.Checksum(b, 0) }

// ipv4 builds an IPv4 packet with a valid header checksum.
func ipv4(src, dst netip.Addr, payload []byte) []byte {
	p := make([]byte, 20, 20+len(payload))
	p[0] = 0x45
	binary.BigEndian.PutUint16(p[2:], uint16(20+len(payload)))
	p[8] = 64
	p[9] = 17
	s, d := src.As4(), dst.As4()
	copy(p[12:], s[:])
	copy(p[16:], d[:])
	binary.BigEndian.PutUint16(p[10:], checksum(p[:20]))
	return append(p, payload...)
}

// ipv6 builds an IPv6 packet.
func ipv6(src, dst netip.Addr, payload []byte) []byte {
	p := make([]byte, 40, 40+len(payload))
	p[0] = 0x60
	binary.BigEndian.PutUint16(p[4:], uint16(len(payload)))
	p[6] = 17
	p[7] = 64
	s, d := src.As16(), dst.As16()
	copy(p[8:], s[:])
	copy(p[24:], d[:])
	return append(p, payload...)
}

// numbered is an IPv4 packet of size bytes whose payload starts with i.
func numbered(i uint32, size int) []byte {
	payload := pattern(size-20, byte(i))
	binary.BigEndian.PutUint32(payload, i)
	return ipv4(ip4A, ip4B, payload)
}

// withHeadroom copies pkt into a gateway-style buffer: Headroom bytes before
// it and BufSize capacity.
func withHeadroom(pkt []byte) []byte {
	b := make([]byte, transport.Headroom+len(pkt), transport.BufSize)
	copy(b[transport.Headroom:], pkt)
	return b
}

// socketBuf places a received datagram where udp.Conn would: at rxOffset in
// a whole buffer.
func socketBuf(d []byte) []byte {
	b := make([]byte, transport.BufSize)
	copy(b[rxOffset:], d)
	return b
}

func local(port uint16) netip.AddrPort {
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, 1}), port)
}

// onFreePort starts a transport with cfg on a port the kernel picks.
func onFreePort(t testing.TB, cfg Config, d transport.Deliverer) *Transport {
	t.Helper()
	s, err := cfg.validate()
	if err != nil {
		t.Fatal(err)
	}
	s.port = 0
	tr, err := start(s, d)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	return tr
}

// recorder is a Deliverer that keeps copies of what it is given and checks
// the buffer layout the transport contract promises.
type recorder struct {
	t      testing.TB
	mu     sync.Mutex
	pkts   [][]byte
	peers  []int
	notify chan struct{}
}

func newRecorder(t testing.TB) *recorder {
	return &recorder{t: t, notify: make(chan struct{}, 1)}
}

func (r *recorder) Deliver(peer int, bufs [][]byte, offset int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, b := range bufs {
		if offset != transport.Headroom {
			r.t.Errorf("delivered at offset %d, want transport.Headroom", offset)
		}
		r.pkts = append(r.pkts, bytes.Clone(b[offset:]))
		r.peers = append(r.peers, peer)
	}
	select {
	case r.notify <- struct{}{}:
	default:
	}
}

func (r *recorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.pkts)
}

func (r *recorder) wait(t testing.TB, n int) {
	t.Helper()
	deadline := time.After(settle)
	for {
		if have := r.count(); have >= n {
			return
		}
		select {
		case <-r.notify:
		case <-deadline:
			t.Fatalf("delivered %d of %d packets", r.count(), n)
		}
	}
}

func (r *recorder) take() ([][]byte, []int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	p, q := r.pkts, r.peers
	r.pkts, r.peers = nil, nil
	return p, q
}

type discard struct{}

func (discard) Deliver(int, [][]byte, int) {}

// dropCount is the count of reason for peer in d.
func dropCount(d []transport.Drop, peer int, reason string) uint64 {
	for _, x := range d {
		if x.Peer == peer && x.Reason == reason {
			return x.Count
		}
	}
	return 0
}

// eventually polls cond until it holds or settle passes.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(settle); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}
