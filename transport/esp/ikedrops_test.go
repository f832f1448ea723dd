package esp

import (
	"context"
	"encoding/binary"
	"net/netip"
	"slices"
	"testing"

	"github.com/snorkel-net/snorkel/transport"
	"github.com/snorkel-net/snorkel/transport/esp/ike"
)

// ikeHeader is an IKE header (RFC 7296 §3.1) behind the non-ESP marker,
// with its length field set to length.
func ikeHeader(spiI, spiR uint64, next, version, exchange, flags byte, length uint32) []byte {
	b := make([]byte, markerLen, markerLen+28)
	b = binary.BigEndian.AppendUint64(b, spiI)
	b = binary.BigEndian.AppendUint64(b, spiR)
	b = append(b, next, version, exchange, flags)
	b = binary.BigEndian.AppendUint32(b, 0)
	return binary.BigEndian.AppendUint32(b, length)
}

// TestEveryGarbageDatagramIsCounted sends a transport keyed by a running
// IKE engine every kind of datagram an attacker could aim at its port, none
// of which may be delivered or set up state, and checks that each one is
// counted, exactly once, by the transport or by the engine.
func TestEveryGarbageDatagramIsCounted(t *testing.T) {
	peerAddr, stranger := local(4000), netip.MustParseAddrPort("127.0.0.2:4000")
	rec := newRecorder(t)
	tr := onFreePort(t, Config{Peers: []Peer{{Endpoint: peerAddr}}}, rec)
	eng, err := ike.NewEngine(ike.Config{
		LocalID: "b.test",
		PSK:     []byte("snorkel-test-psk-0123456789abcdef"),
		Peers: []ike.PeerConfig{{
			Endpoint: peerAddr, LocalTS: []netip.Prefix{netip.MustParsePrefix("10.2.0.0/16")},
			RemoteTS: []netip.Prefix{netip.MustParsePrefix("10.1.0.0/16")},
		}},
	}, tr, tr, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		eng.Run(ctx)
	}()
	t.Cleanup(func() { cancel(); <-done })
	tr.SetIKEHandler(eng.Receive)

	const (
		exchInit, exchAuth = 34, 35
		v2, flagI          = 0x20, 0x08
	)
	critical := append(ikeHeader(1, 0, 200, v2, exchInit, flagI, 32), 0, 0x80, 0, 4)
	unknownESP := make([]byte, 64)
	binary.BigEndian.PutUint32(unknownESP, 0x12345678)
	kinds := []struct {
		name string
		from netip.AddrPort
		b    []byte
	}{
		{"three bytes", stranger, []byte{1, 2, 3}},
		{"one byte that is no keepalive", peerAddr, []byte{0x42}},
		{"a keepalive", peerAddr, []byte{keepaliveByte}},
		{"ESP with an unknown SPI", stranger, unknownESP},
		{"an ESP header alone", peerAddr, unknownESP[:espHeaderLen]},
		{"a marker alone", peerAddr, make([]byte, markerLen)},
		{"half an IKE header", stranger, make([]byte, markerLen+10)},
		{"IKE version 1", peerAddr, ikeHeader(1, 0, 0, 0x10, exchInit, flagI, 28)},
		{"a length beyond the datagram", peerAddr, ikeHeader(1, 0, 0, v2, exchInit, flagI, 100)},
		{"IKE_SA_INIT from a stranger", stranger, ikeHeader(1, 0, 0, v2, exchInit, flagI, 28)},
		{"IKE_SA_INIT without payloads", peerAddr, ikeHeader(2, 0, 0, v2, exchInit, flagI, 28)},
		{"IKE_SA_INIT with a responder SPI", peerAddr, ikeHeader(3, 4, 0, v2, exchInit, flagI, 28)},
		{"an unknown critical payload", peerAddr, critical},
		{"IKE_AUTH for an unknown IKE SA", peerAddr, ikeHeader(5, 6, 0, v2, exchAuth, flagI, 28)},
		{"a response for an unknown IKE SA", stranger, ikeHeader(7, 8, 0, v2, exchAuth, 0x20, 28)},
	}
	var once datagrams
	for _, k := range kinds {
		once.add(k.b, k.from)
	}
	tr.receive(once.bufs, once.sizes, once.srcs)
	counted := func(n uint64) func() bool {
		return func() bool {
			var s uint64
			for _, x := range tr.Drops() {
				s += x.Count
			}
			if s > n {
				t.Fatalf("%d drops counted for %d datagrams: %v", s, n, tr.Drops())
			}
			return s == n
		}
	}
	eventually(t, "each kind counted", counted(uint64(len(kinds))))
	want := []transport.Drop{
		{Peer: transport.PeerAny, Reason: "truncated", Count: 2},
		{Peer: transport.PeerAny, Reason: "unknown_spi", Count: 2},
		{Peer: transport.PeerAny, Reason: "ike_truncated", Count: 1},
		{Peer: transport.PeerAny, Reason: "ike_unknown_peer", Count: 1},
		{Peer: transport.PeerAny, Reason: "ike_unknown_ike_spi", Count: 1},
		{Peer: 0, Reason: "keepalive", Count: 1},
		{Peer: 0, Reason: "ike_truncated", Count: 1},
		{Peer: 0, Reason: "ike_bad_version", Count: 1},
		{Peer: 0, Reason: "ike_malformed", Count: 3},
		{Peer: 0, Reason: "ike_unsupported_critical", Count: 1},
		{Peer: 0, Reason: "ike_unknown_ike_spi", Count: 1},
	}
	if got := tr.Drops(); !slices.Equal(got, want) {
		t.Fatalf("Drops() =\n%v\nwant\n%v", got, want)
	}

	// Then a burst, beyond the engine's queue, whose overflow is counted
	// too: the sum is exact whatever the interleaving.
	const rounds = 40
	var burst datagrams
	for range rounds {
		for _, k := range kinds {
			burst.add(k.b, k.from)
		}
	}
	for i := 0; i < len(burst.bufs); i += 64 {
		j := min(i+64, len(burst.bufs))
		tr.receive(burst.bufs[i:j], burst.sizes[i:j], burst.srcs[i:j])
	}
	n := uint64(len(kinds) * (rounds + 1))
	eventually(t, "every datagram counted", counted(n))
	if c := rec.count(); c != 0 {
		t.Fatalf("%d garbage datagrams delivered", c)
	}
	if st := eng.Status()[0]; st.State != ike.StateDown {
		t.Fatalf("peer state %s after garbage, want down", st.State)
	}
}
