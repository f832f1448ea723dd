package esp

import (
	"fmt"

	"github.com/snorkel-net/snorkel/transport"
	"github.com/snorkel-net/snorkel/transport/esp/ike"
)

// child is an installed CHILD_SA: its two SAs and the peer they belong to.
type child struct {
	peer  int
	order uint64 // when it was installed, for DeleteChild's fallback
	in    *inbound
	out   *outbound
}

// InstallChild adds the CHILD_SA c: its inbound SA accepts packets at once,
// and its outbound SA becomes the one Send uses for c.Peer — at once, or if
// c.Deferred and the peer has an outbound SA, when the first packet opens on
// c's inbound SA or the current one is deleted — so that a rekey is
// make-before-break; the old inbound SA keeps accepting until DeleteChild.
// The keys are copied. It implements ike.DataPlane.
func (t *Transport) InstallChild(c ike.ChildSA) error {
	if t.closed.Load() {
		return fmt.Errorf("esp: install CHILD_SA: %w", transport.ErrClosed)
	}
	if err := checkSPI("InSPI", c.InSPI); err != nil {
		return err
	}
	if err := checkSPI("OutSPI", c.OutSPI); err != nil {
		return err
	}
	if err := checkTransform(c.Transform); err != nil {
		return err
	}
	inSuite, err := newSuite(c.Transform, c.In, "In", false)
	if err != nil {
		return err
	}
	outSuite, err := newSuite(c.Transform, c.Out, "Out", true)
	if err != nil {
		return err
	}
	ch := &child{
		peer: c.Peer,
		in:   newInbound(c.InSPI, c.Peer, inSuite, c.Transform.ESN),
		out:  newOutbound(c.OutSPI, outSuite, c.Transform.ESN),
	}

	t.mu.Lock()
	defer t.mu.Unlock()
	p := t.peer(c.Peer)
	if p == nil {
		return fmt.Errorf("esp: ChildSA.Peer %d: no such peer", c.Peer)
	}
	if old, used := t.children[c.InSPI]; used {
		return fmt.Errorf("esp: ChildSA.InSPI 0x%08x: already in use by a CHILD_SA of peer %d; delete it first or choose another SPI", c.InSPI, old.peer)
	}
	t.installs++
	ch.order = t.installs
	ch.in.owner = p
	t.children[c.InSPI] = ch
	if c.Deferred && p.out.Load() != nil {
		ch.in.pending.Store(ch.out)
	} else {
		p.out.Store(ch.out)
	}
	t.publishInbound()
	return nil
}

// promote makes the outbound SA of in's CHILD_SA, installed Deferred, the
// one Send uses for its peer: a packet has opened on in, so the peer has
// the CHILD_SA.
func (t *Transport) promote(in *inbound) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if ch, ok := t.children[in.spi]; ok && ch.in == in {
		if o := in.pending.Swap(nil); o != nil {
			in.owner.out.Store(o)
		}
	}
}

// DeleteChild removes the CHILD_SA of peer whose inbound SPI is inSPI: its
// inbound SA accepts nothing after the batch being opened, if any. If it
// was the peer's outbound SA, Send
// falls back to the peer's most recently installed remaining one, or drops
// until the next InstallChild. It implements ike.DataPlane.
func (t *Transport) DeleteChild(peer int, inSPI uint32) {
	t.mu.Lock()
	defer t.mu.Unlock()
	ch, ok := t.children[inSPI]
	if !ok || ch.peer != peer {
		return
	}
	delete(t.children, inSPI)
	t.publishInbound()
	p := ch.in.owner
	if p.out.Load() != ch.out {
		return
	}
	var next *child
	for _, c := range t.children {
		if c.peer == peer && (next == nil || c.order > next.order) {
			next = c
		}
	}
	if next == nil {
		p.out.Store(nil)
		return
	}
	next.in.pending.Store(nil)
	p.out.Store(next.out)
}

// Stats reports on the CHILD_SA of peer whose inbound SPI is inSPI. Bytes
// are those of the inner packets; OutSeq is the last sequence number
// reserved for sending; LastIn has the resolution of the transport's coarse
// clock (clockTick). It implements ike.DataPlane.
func (t *Transport) Stats(peer int, inSPI uint32) (ike.SAStats, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	ch, ok := t.children[inSPI]
	if !ok || ch.peer != peer {
		return ike.SAStats{}, false
	}
	return ike.SAStats{
		OutBytes: ch.out.bytes.Load(),
		InBytes:  ch.in.bytes.Load(),
		OutSeq:   ch.out.seq.Load(),
		LastIn:   ch.in.last.Load(),
	}, true
}

// publishInbound replaces the receive path's SPI map with one built from
// the installed CHILD_SAs. t.mu must be held.
func (t *Transport) publishInbound() {
	m := make(map[uint32]*inbound, len(t.children))
	for spi, ch := range t.children {
		m[spi] = ch.in
	}
	t.inbound.Store(&m)
}

// checkSPI refuses the SPIs that RFC 4303 §2.1 reserves: 0, which the
// non-ESP marker of RFC 3948 §2.2 also relies on, and 1 to 255.
func checkSPI(field string, spi uint32) error {
	if spi < 256 {
		return fmt.Errorf("esp: ChildSA.%s %d: reserved (RFC 4303 §2.1); want 256 or more", field, spi)
	}
	return nil
}

// checkTransform accepts the two suites this package implements.
func checkTransform(tr ike.Transform) error {
	switch tr.Encr {
	case ike.EncrAESGCM16:
		if tr.Integ != ike.IntegNone {
			return fmt.Errorf("esp: ChildSA.Transform.Integ %d: AES-GCM is combined mode and takes none (%d)", tr.Integ, ike.IntegNone)
		}
	case ike.EncrAESCBC:
		if tr.Integ != ike.IntegHMACSHA256_128 {
			return fmt.Errorf("esp: ChildSA.Transform.Integ %d: AES-CBC needs %d (AUTH_HMAC_SHA2_256_128)", tr.Integ, ike.IntegHMACSHA256_128)
		}
	default:
		return fmt.Errorf("esp: ChildSA.Transform.Encr %d: unsupported; want %d (ENCR_AES_GCM_16) or %d (ENCR_AES_CBC)", tr.Encr, ike.EncrAESGCM16, ike.EncrAESCBC)
	}
	if tr.KeyBits != 128 && tr.KeyBits != 256 {
		return fmt.Errorf("esp: ChildSA.Transform.KeyBits %d: want 128 or 256", tr.KeyBits)
	}
	return nil
}

// newSuite builds the suite of one direction ("In" or "Out") of a checked
// transform from its keys.
func newSuite(tr ike.Transform, k ike.Keys, dir string, outbound bool) (suite, error) {
	keyLen := tr.KeyBits / 8
	if tr.Encr == ike.EncrAESGCM16 {
		if len(k.Encr) != keyLen+gcmSaltLen {
			return nil, fmt.Errorf("esp: ChildSA.%s.Encr: %d bytes; AES-GCM-%d takes %d, the key and a %d-byte salt (RFC 4106 §8.1)", dir, len(k.Encr), tr.KeyBits, keyLen+gcmSaltLen, gcmSaltLen)
		}
		if len(k.Integ) != 0 {
			return nil, fmt.Errorf("esp: ChildSA.%s.Integ: %d bytes; AES-GCM takes no integrity key", dir, len(k.Integ))
		}
		return newGCM(k.Encr)
	}
	if len(k.Encr) != keyLen {
		return nil, fmt.Errorf("esp: ChildSA.%s.Encr: %d bytes; AES-CBC-%d takes %d", dir, len(k.Encr), tr.KeyBits, keyLen)
	}
	if len(k.Integ) != hmacKeyLen {
		return nil, fmt.Errorf("esp: ChildSA.%s.Integ: %d bytes; HMAC-SHA-256-128 takes %d (RFC 4868 §2.1.1)", dir, len(k.Integ), hmacKeyLen)
	}
	return newCBC(k.Encr, k.Integ, outbound)
}
