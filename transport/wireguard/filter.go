package wireguard

import (
	"crypto/hmac"
	"encoding/binary"
	"hash"
	"net/netip"
	"sync/atomic"

	"github.com/snorkel-net/snorkel/transport"
	"golang.org/x/crypto/blake2s"
	"golang.zx2c4.com/wireguard/conn"
	"golang.zx2c4.com/wireguard/device"
)

// Offsets of the receiver index (WireGuard paper §5.4.3, §5.4.7, §5.4.6).
const (
	responseOffsetReceiver = 8
	cookieOffsetReceiver   = 4
)

// macSize is the length of mac1 and of mac2, which end every handshake
// initiation and response (WireGuard paper §5.4.4).
const macSize = blake2s.Size128

// filter decides, before the device sees a datagram, whether the device
// would discard it without a trace, and counts those it drops. It checks
// exactly what the device's receive loop and handshake workers check up to
// the first step that needs a session's keys, in the same order, so that a
// datagram it passes is either taken by the device or dropped by a step the
// log sink counts.
type filter struct {
	drops   *dropCounters
	indices *indexTable
	// mac1Key is HASH(LABEL_MAC1 || our public key) (WireGuard paper §5.4.4).
	mac1Key [blake2s.Size]byte
	// endpoints maps a peer's endpoint, unmapped, to its peer number. It
	// is replaced whole when the device learns endpoints or the peers change.
	endpoints atomic.Pointer[map[netip.AddrPort]int]
	// recipients are the current peers, by which the indices handed out are
	// attributed. It is replaced whole when the peers change.
	recipients atomic.Pointer[[]recipient]
}

// recipient is a peer as the filter tells it apart: by the mac1 of the
// handshake messages sent to it.
type recipient struct {
	key     Key
	mac1Key [blake2s.Size]byte
}

func newFilter(self Key, drops *dropCounters) *filter {
	f := &filter{drops: drops, indices: newIndexTable(), mac1Key: mac1KeyOf(self)}
	f.endpoints.Store(&map[netip.AddrPort]int{})
	f.recipients.Store(&[]recipient{})
	return f
}

// mac1KeyOf is HASH(LABEL_MAC1 || pub), the key of the mac1 of handshake
// messages to the holder of pub (WireGuard paper §5.4.4).
func mac1KeyOf(pub Key) [blake2s.Size]byte {
	var k [blake2s.Size]byte
	h, _ := blake2s.New256(nil)
	h.Write([]byte("mac1----"))
	h.Write(pub[:])
	h.Sum(k[:0])
	return k
}

// macer computes mac1 for one receive goroutine: blake2s.New128 allocates, so
// each goroutine keeps one keyed hash and resets it per message.
type macer struct {
	h   hash.Hash
	sum [macSize]byte
}

func (f *filter) newMacer() *macer { return newMacer(&f.mac1Key) }

func newMacer(key *[blake2s.Size]byte) *macer {
	h, err := blake2s.New128(key[:])
	if err != nil {
		// Only a key longer than 32 bytes is refused, and ours is 32.
		panic(err)
	}
	return &macer{h: h}
}

// validMAC1 checks mac1 over the message up to it, as the device's
// CookieChecker.CheckMAC1 does, without allocating.
func (m *macer) validMAC1(msg []byte) bool {
	smac1 := len(msg) - 2*macSize
	m.h.Reset()
	m.h.Write(msg[:smac1])
	m.h.Sum(m.sum[:0])
	return hmac.Equal(m.sum[:], msg[smac1:smac1+macSize])
}

// verdict returns the reason to drop msg, or drop false to pass it.
func (f *filter) verdict(m *macer, msg []byte) (r reason, drop bool) {
	if len(msg) < device.MinMessageSize {
		return reasonTooShort, true
	}
	// The type is a little-endian uint32, so a non-zero reserved byte makes
	// it unknown (WireGuard paper §5.4).
	switch binary.LittleEndian.Uint32(msg) {
	case device.MessageInitiationType:
		if len(msg) != device.MessageInitiationSize {
			return reasonBadSize, true
		}
		if !m.validMAC1(msg) {
			return reasonBadMAC1, true
		}
	case device.MessageResponseType:
		if len(msg) != device.MessageResponseSize {
			return reasonBadSize, true
		}
		if !m.validMAC1(msg) {
			return reasonBadMAC1, true
		}
		if !f.indices.known(binary.LittleEndian.Uint32(msg[responseOffsetReceiver:])) {
			return reasonUnknownIndex, true
		}
	case device.MessageCookieReplyType:
		// A cookie reply has no mac1: it is authenticated by the
		// encryption of the cookie under the mac1 it answers (§5.4.7).
		if len(msg) != device.MessageCookieReplySize {
			return reasonBadSize, true
		}
		if !f.indices.known(binary.LittleEndian.Uint32(msg[cookieOffsetReceiver:])) {
			return reasonUnknownIndex, true
		}
	case device.MessageTransportType:
		if !f.indices.known(binary.LittleEndian.Uint32(msg[device.MessageTransportOffsetReceiver:])) {
			return reasonUnknownIndex, true
		}
	default:
		return reasonUnknownMessage, true
	}
	return 0, false
}

// peerOf is the index of the peer whose endpoint ep is, or PeerAny.
func (f *filter) peerOf(ep conn.Endpoint) int {
	e, ok := ep.(*conn.StdNetEndpoint)
	if !ok {
		return transport.PeerAny
	}
	ap := netip.AddrPortFrom(e.Addr().Unmap(), e.Port())
	if i, ok := (*f.endpoints.Load())[ap]; ok {
		return i
	}
	return transport.PeerAny
}

// setEndpoints records the peers' current endpoints, indexed by peer number.
func (f *filter) setEndpoints(eps []netip.AddrPort) {
	m := make(map[netip.AddrPort]int, len(eps))
	for i, ap := range eps {
		if ap.IsValid() {
			m[netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())] = i
		}
	}
	f.endpoints.Store(&m)
}

// setRecipients records the current peers' public keys.
func (f *filter) setRecipients(keys []Key) {
	rs := make([]recipient, len(keys))
	for i, k := range keys {
		rs[i] = recipient{key: k, mac1Key: mac1KeyOf(k)}
	}
	f.recipients.Store(&rs)
}

// recipientOf is the public key of the peer that msg, a handshake
// initiation or response the device sends, is for, or the zero Key if it
// is for no current peer. The device keys the mac1 of both with the
// recipient's public key. It allocates a hash per peer tried, which is
// once per handshake, not per packet.
func (f *filter) recipientOf(msg []byte) Key {
	for _, r := range *f.recipients.Load() {
		if newMacer(&r.mac1Key).validMAC1(msg) {
			return r.key
		}
	}
	return Key{}
}
