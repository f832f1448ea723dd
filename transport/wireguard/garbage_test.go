package wireguard

import (
	"encoding/binary"
	"math/rand/v2"
	"net"
	"net/netip"
	"testing"

	"github.com/snorkel-net/snorkel/transport"
	"github.com/snorkel-net/snorkel/transport/internal/transporttest"
	"golang.org/x/crypto/blake2s"
)

// garbage is one kind of datagram a stranger might send at the port, and the
// reason it must be counted under.
type garbage struct {
	name   string
	reason string
	make   func(rng *rand.Rand, mac1Key []byte) []byte
}

// message returns size random bytes that start with WireGuard type typ.
func message(rng *rand.Rand, typ uint32, size int) []byte {
	b := make([]byte, size)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	if size >= 4 {
		binary.LittleEndian.PutUint32(b, typ)
	}
	return b
}

// withMAC1 sets b's mac1 as a sender that knows the receiver's public key
// would (WireGuard paper §5.4.4).
func withMAC1(b, mac1Key []byte) []byte {
	off := len(b) - 2*blake2s.Size128
	h, _ := blake2s.New128(mac1Key)
	h.Write(b[:off])
	h.Sum(b[:off])
	return b
}

var garbageKinds = []garbage{
	{"one byte", ReasonTooShort, func(r *rand.Rand, _ []byte) []byte { return message(r, 0, 1) }},
	{"a keepalive less one byte", ReasonTooShort, func(r *rand.Rand, _ []byte) []byte { return message(r, 4, 31) }},
	{"type 0", ReasonUnknownMessage, func(r *rand.Rand, _ []byte) []byte { return message(r, 0, 100) }},
	{"type 5", ReasonUnknownMessage, func(r *rand.Rand, _ []byte) []byte { return message(r, 5, 148) }},
	{"type 1 with a reserved byte set", ReasonUnknownMessage, func(r *rand.Rand, _ []byte) []byte { return message(r, 1|1<<16, 148) }},
	{"initiation of 147 bytes", ReasonBadSize, func(r *rand.Rand, _ []byte) []byte { return message(r, 1, 147) }},
	{"initiation of 149 bytes", ReasonBadSize, func(r *rand.Rand, _ []byte) []byte { return message(r, 1, 149) }},
	{"response of 148 bytes", ReasonBadSize, func(r *rand.Rand, _ []byte) []byte { return message(r, 2, 148) }},
	{"cookie reply of 92 bytes", ReasonBadSize, func(r *rand.Rand, _ []byte) []byte { return message(r, 3, 92) }},
	{"initiation with a random mac1", ReasonBadMAC1, func(r *rand.Rand, _ []byte) []byte { return message(r, 1, 148) }},
	{"response with a random mac1", ReasonBadMAC1, func(r *rand.Rand, _ []byte) []byte { return message(r, 2, 92) }},
	{"response to an unknown index", ReasonUnknownIndex, func(r *rand.Rand, k []byte) []byte { return withMAC1(message(r, 2, 92), k) }},
	{"cookie reply to an unknown index", ReasonUnknownIndex, func(r *rand.Rand, _ []byte) []byte { return message(r, 3, 64) }},
	{"keepalive to an unknown index", ReasonUnknownIndex, func(r *rand.Rand, _ []byte) []byte { return message(r, 4, 32) }},
	{"transport message to an unknown index", ReasonUnknownIndex, func(r *rand.Rand, _ []byte) []byte { return message(r, 4, 1000) }},
	// The mac1 is right, so only the device, which has the private key,
	// can tell the initiation is forged.
	{"initiation from no peer", ReasonHandshakeInvalid, func(r *rand.Rand, k []byte) []byte { return withMAC1(message(r, 1, 148), k) }},
}

// TestGarbageIsCountedExactly sends every kind of garbage from a stranger and
// from a configured peer's endpoint, and expects each datagram counted once,
// under its reason and against its sender; genuine traffic must then still
// cross without a drop.
func TestGarbageIsCountedExactly(t *testing.T) {
	stranger := listenUDP(t)
	impostor := listenUDP(t)
	keyC, err := GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	// Peer 1 of B is a gateway that is never started; the impostor
	// sends from its configured endpoint.
	p := newPair(t, nil, func(c *Config) {
		c.Peers = append(c.Peers, Peer{
			PublicKey:  keyC.Public(),
			Endpoint:   impostor.LocalAddr().(*net.UDPAddr).AddrPort(),
			AllowedIPs: []netip.Prefix{netip.MustParsePrefix("10.3.0.0/16")},
		})
	})
	sendPackets(t, p.a, hostA, hostB, 1, 100, 0)
	p.cb.waitFor(t, 1)
	if ds := p.b.Drops(); len(ds) != 0 {
		t.Fatalf("B dropped %v during the handshake", ds)
	}

	var mac1Key [blake2s.Size]byte
	h, _ := blake2s.New256(nil)
	h.Write([]byte("mac1----"))
	pub := p.keyB.Public()
	h.Write(pub[:])
	h.Sum(mac1Key[:0])

	const each = 3
	rng := rand.New(rand.NewPCG(1, 2))
	to := &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: int(p.b.Port())}
	want := make(map[transport.Drop]uint64)
	sent := 0
	for _, from := range []struct {
		conn *net.UDPConn
		peer int
	}{{stranger, transport.PeerAny}, {impostor, 1}} {
		for _, g := range garbageKinds {
			for range each {
				if _, err := from.conn.WriteToUDP(g.make(rng, mac1Key[:]), to); err != nil {
					t.Fatal(err)
				}
				sent++
				peer := from.peer
				if g.reason == ReasonHandshakeInvalid {
					// The device names no peer for a handshake it
					// cannot authenticate.
					peer = transport.PeerAny
				}
				want[transport.Drop{Peer: peer, Reason: g.reason}]++
			}
		}
	}

	transporttest.WaitForDrops(t, p.b, uint64(sent), settle)
	checkDrops := func(when string) {
		t.Helper()
		for _, d := range transporttest.DropsDiff(p.b.Drops(), want) {
			t.Errorf("%s: B counts %s", when, d)
		}
	}
	checkDrops("after the garbage")

	wantAB := sendPackets(t, p.a, hostA, hostB, 20, 1000, 100)
	checkSame(t, "A to B after the garbage", p.cb.waitFor(t, 1+20)[1:], wantAB)
	wantBA := sendPackets(t, p.b, hostB, hostA, 20, 1000, 200)
	checkSame(t, "B to A after the garbage", p.ca.waitFor(t, 20), wantBA)
	checkDrops("after genuine traffic")
	if ds := p.a.Drops(); len(ds) != 0 {
		t.Errorf("A dropped %v", ds)
	}
}

func listenUDP(t *testing.T) *net.UDPConn {
	t.Helper()
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}
