package ike

import (
	"net/netip"
	"testing"
	"time"
)

// spoofedInits returns n IKE_SA_INIT requests, each with its own SPI and
// nonce, made from tmpl, one an engine sent.
func spoofedInits(t *testing.T, tmpl []byte, n int) [][]byte {
	t.Helper()
	out := make([][]byte, n)
	for i := range out {
		m, err := parseMessage(tmpl)
		if err != nil {
			t.Fatal(err)
		}
		m.spiI = uint64(i) + 1
		nonce, _ := first[*noncePayload](m.payloads)
		nonce.data = newNonce()
		out[i] = m.encode()
	}
	return out
}

// withCookie returns the request b with c as its first payload, as an
// initiator retries (RFC 7296 §2.6).
func withCookie(t *testing.T, b, c []byte) []byte {
	t.Helper()
	m, err := parseMessage(b)
	if err != nil {
		t.Fatal(err)
	}
	m.payloads = append([]payload{&notifyPayload{typ: notifyCookie, data: c}}, m.payloads...)
	return m.encode()
}

// TestFloodOfSpoofedInitsLetsThePeerIn floods a responder with IKE_SA_INIT
// requests from thousands of addresses that are no peer's and from
// thousands of ports of the peer's own address, as a sender of spoofed
// datagrams can; then the real peer connects. Cookies must engage at the
// threshold, so that the half-open SAs stay there, the real peer must get
// through with the cookie it is sent, every spoofed request must be counted,
// and the half-open SAs must expire.
func TestFloodOfSpoofedInitsLetsThePeerIn(t *testing.T) {
	const flood = 3000
	n := newTestNet(t)
	dpB := newFakeDP()
	b := n.add(addrB, baseConfig(addrB), dpB, nil)
	init := spoofedInits(t, initRequestFrom(t, addrB), 2*flood)
	for i := range flood {
		stranger := netip.AddrPortFrom(netip.AddrFrom4([4]byte{198, 18, byte(i >> 8), byte(i)}), 4500)
		b.handle(stranger, init[i], n.now)
		spoofed := netip.AddrPortFrom(addrA.Addr(), uint16(10000+i))
		b.handle(spoofed, init[flood+i], n.now)
		if h := b.halfOpen(); h > DefaultCookieThreshold {
			t.Fatalf("%d half-open SAs after %d spoofed requests; cookies should hold them at %d", h, 2*i+2, DefaultCookieThreshold)
		}
	}
	drops, sum := dpB.dropped()
	if drops[DropUnknownPeer] != flood || drops[DropCookieRequired] != flood-DefaultCookieThreshold || sum != 2*flood-DefaultCookieThreshold {
		t.Fatalf("drops %v (sum %d) after %d spoofed requests; want %d unknown_peer and the rest but %d cookie_required",
			drops, sum, 2*flood, flood, DefaultCookieThreshold)
	}
	n.queue = nil // the answers to spoofed addresses go nowhere

	dpA := newFakeDP()
	a := n.add(addrA, baseConfig(addrA), dpA, nil)
	a.start(n.now)
	n.run(5 * time.Second)
	if st := b.Status()[0]; st.State != StateEstablished {
		t.Fatalf("the real peer at B: %s (%s), want established", st.State, st.LastError)
	}
	if st := a.Status()[0]; st.State != StateEstablished || len(dpA.current()) != 1 || len(dpB.current()) != 1 {
		t.Fatalf("A: %s (%s), CHILD_SAs A %d, B %d; want established with one each", st.State, st.LastError, len(dpA.current()), len(dpB.current()))
	}
	if got := n.count(addrA, exchIKESAInit, false); got != 2 {
		t.Fatalf("A sent %d IKE_SA_INIT requests; want the first and its retry with the cookie", got)
	}
	if drops, _ := dpB.dropped(); drops[DropCookieRequired] != flood-DefaultCookieThreshold+1 {
		t.Fatalf("cookie_required %d, want the flood's and the real peer's first request", drops[DropCookieRequired])
	}
	if _, sum := dpA.dropped(); sum != 0 {
		t.Fatalf("the real peer dropped %d messages", sum)
	}

	n.run(time.Minute)
	if h := b.halfOpen(); h != 0 {
		t.Fatalf("%d half-open SAs a minute after the flood; want them expired", h)
	}
	if st := b.Status()[0]; st.State != StateEstablished {
		t.Fatalf("the real peer at B after the half-open SAs expired: %s, want established", st.State)
	}
}

// TestHalfOpenLimit is an attacker who sees the responder's answers, and so
// returns every cookie: the half-open SAs stop at HalfOpenLimit, and the
// requests beyond it are dropped and counted.
func TestHalfOpenLimit(t *testing.T) {
	const threshold, limit, tries = 2, 5, 12
	n := newTestNet(t)
	dpB := newFakeDP()
	cfg := baseConfig(addrB)
	cfg.CookieThreshold, cfg.HalfOpenLimit = threshold, limit
	b := n.add(addrB, cfg, dpB, nil)
	for i, req := range spoofedInits(t, initRequestFrom(t, addrB), tries) {
		from := netip.AddrPortFrom(addrA.Addr(), uint16(10000+i))
		n.queue = nil
		b.handle(from, req, n.now)
		if len(n.queue) == 1 {
			if m, _ := parseMessage(n.queue[0].msg); notify(m.payloads, notifyCookie) != nil {
				b.handle(from, withCookie(t, req, notify(m.payloads, notifyCookie).data), n.now)
			}
		}
		if h := b.halfOpen(); h > limit {
			t.Fatalf("%d half-open SAs, limit %d", h, limit)
		}
	}
	drops, _ := dpB.dropped()
	if b.halfOpen() != limit || drops[DropHalfOpenLimit] != tries-limit || drops[DropCookieRequired] != tries-threshold {
		t.Fatalf("%d half-open, drops %v; want %d half-open, %d half_open_limit and %d cookie_required",
			b.halfOpen(), drops, limit, tries-limit, tries-threshold)
	}
}

// TestEngineCountsWhatItDiscards sends an established responder messages
// that fit its IKE SA's header but must not advance it, and more than its
// queue takes: each is counted once, under its reason.
func TestEngineCountsWhatItDiscards(t *testing.T) {
	p := newPair(t, nil)
	p.n.run(time.Second)
	p.established(t)
	sa, sb := p.a.peers[0].ike, p.b.peers[0].ike
	var auth []byte
	for _, m := range p.n.sent {
		if m.from == addrA && m.msg[18] == exchIKEAuth {
			auth = m.msg
		}
	}
	forged := sa.seal(exchInformational, sb.peerID, false, nil)
	forged[len(forged)-1] ^= 1
	otherSPI := sa.seal(exchInformational, sb.peerID, false, nil)
	otherSPI[0] ^= 1
	msgs := []struct {
		b    []byte
		want DropReason
	}{
		{auth, DropRetransmit},
		{sa.seal(exchInformational, sb.peerID+50, false, nil), DropUnexpectedID},
		{sa.seal(exchInformational, 7, true, nil), DropUnexpectedID},
		{sa.seal(99, sb.peerID, false, nil), DropBadExchange},
		{forged, DropIntegrity},
		{otherSPI, DropSAMismatch},
	}
	want := map[DropReason]int{}
	for _, m := range msgs {
		p.b.handle(addrA, m.b, p.n.now)
		want[m.want]++
		if got, _ := p.dpB.dropped(); got[m.want] != want[m.want] {
			t.Fatalf("drops %v, want %d %s", got, want[m.want], m.want)
		}
	}
	p.b.Receive(addrA, make([]byte, maxMessage+1))
	for range inboxSize + 3 {
		p.b.Receive(addrA, auth)
	}
	got, sum := p.dpB.dropped()
	if got[DropOversize] != 1 || got[DropQueueFull] != 3 || sum != len(msgs)+4 {
		t.Fatalf("drops %v (sum %d); want %d in all, one oversize and 3 queue_full", got, sum, len(msgs)+4)
	}
	if st := p.b.Status()[0]; st.State != StateEstablished || len(p.dpB.current()) != 1 {
		t.Fatalf("B after the garbage: %s with %d CHILD_SAs; want established with one", st.State, len(p.dpB.current()))
	}
}
