package wireguard

import (
	"encoding/binary"
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"

	"github.com/snorkel-net/snorkel/transport"
	"github.com/snorkel-net/snorkel/transport/internal/transporttest"
	"golang.zx2c4.com/wireguard/conn"
)

func TestReceiveFilterDoesNotAllocate(t *testing.T) {
	self, _ := GenerateKey()
	f := newFilter(self.Public(), newDropCounters(1))
	f.indices.learn(7, Key{}, time.Now())
	f.setEndpoints([]netip.AddrPort{netip.MustParseAddrPort("192.0.2.1:51820")})
	rng := rand.New(rand.NewPCG(3, 4))
	var k [32]byte
	copy(k[:], f.mac1Key[:])
	known := message(rng, 4, 1000)
	binary.LittleEndian.PutUint32(known[4:], 7)
	batch := [][]byte{
		message(rng, 0, 10),
		message(rng, 1, 148),
		withMAC1(message(rng, 1, 148), k[:]),
		withMAC1(message(rng, 2, 92), k[:]),
		message(rng, 4, 1000),
		known,
	}
	sizes := make([]int, len(batch))
	ep := &conn.StdNetEndpoint{AddrPort: netip.MustParseAddrPort("192.0.2.1:51820")}
	eps := make([]conn.Endpoint, len(batch))
	recv := func(bufs [][]byte, sz []int, e []conn.Endpoint) (int, error) {
		for i := range bufs {
			sz[i] = len(bufs[i])
			e[i] = ep
		}
		return len(bufs), nil
	}
	r := &receiver{recv: recv, f: f, mac: f.newMacer()}
	if allocs := transporttest.FewestAllocs(1000, func() { r.receive(batch, sizes, eps) }); allocs != 0 {
		t.Errorf("filtering a batch allocates %v times", allocs)
	}
	wantSizes := []int{0, 0, 148, 0, 0, 1000}
	for i, want := range wantSizes {
		if sizes[i] != want {
			t.Errorf("datagram %d: size %d after filtering, want %d", i, sizes[i], want)
		}
	}
	if n := dropCount(f.drops.snapshot(), 0, ReasonUnknownIndex); n == 0 {
		t.Errorf("drops from a peer's endpoint are not counted against the peer: %v", f.drops.snapshot())
	}
}

func TestIndexTableEvictsIntoLettingThrough(t *testing.T) {
	tab := newIndexTable()
	now := time.Unix(1000, 0)
	for i := range uint32(maxIndices) {
		tab.learn(i, Key{}, now.Add(time.Duration(i)))
	}
	if tab.known(maxIndices + 1) {
		t.Fatalf("an index never handed out is known")
	}
	// A full table forgets its oldest index, which may still be live, so
	// it must let every index through until that one has surely expired.
	tab.learn(maxIndices, Key{}, now.Add(maxIndices))
	if !tab.known(maxIndices + 1) {
		t.Errorf("an index is dropped while an evicted one may be live")
	}
	tab.learn(maxIndices+2, Key{}, now.Add(indexLifetime+time.Second))
	if tab.known(maxIndices+1) || !tab.known(maxIndices+2) {
		t.Errorf("after every evicted index expired: known(unknown) = %v, known(new) = %v", tab.known(maxIndices+1), tab.known(maxIndices+2))
	}
	if n := len(tab.set.Load().expires); n != 1 {
		t.Errorf("%d indices kept after all but one expired, want 1", n)
	}
}

// A replayed or flooding initiation is logged twice, once by its reason and
// once as invalid; it must be counted once.
func TestReplayIsCountedOnce(t *testing.T) {
	s := &logSink{drops: newDropCounters(1)}
	s.verbosef(fmtHandshakeReplay, "p", "t")
	s.verbosef(fmtInvalidInitiation, "127.0.0.1:1")
	s.verbosef(fmtHandshakeFlood, "p")
	s.verbosef(fmtInvalidInitiation, "127.0.0.1:1")
	s.verbosef(fmtInvalidInitiation, "127.0.0.1:1")
	ds := s.drops.snapshot()
	for reason, want := range map[string]uint64{ReasonHandshakeReplay: 1, ReasonHandshakeFlood: 1, ReasonHandshakeInvalid: 1} {
		if n := dropCount(ds, transport.PeerAny, reason); n != want {
			t.Errorf("%s counted %d times, want %d; all: %v", reason, n, want, ds)
		}
	}
}
