package natdiscovery

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"net/netip"
)

// Type says whether a message asks or answers.
type Type uint8

const (
	Request  Type = 1
	Response Type = 2
)

// NonceLen is the length of a request's random number, echoed by its
// response.
const NonceLen = 16

// MaxIDLen is the longest cluster ID a message carries: a DNS label.
const MaxIDLen = 63

// MaxSize bounds an encoded message.
const MaxSize = headerLen + 2*(1+MaxIDLen) + seenLen + macLen

const (
	magic     = "snkd"
	version   = 1
	headerLen = len(magic) + 2 + NonceLen
	seenLen   = 16 + 2
	macLen    = 16
)

// Message is a request or a response.
type Message struct {
	Type  Type
	Nonce [NonceLen]byte
	// From is the sender's cluster ID, To the receiver's.
	From, To string
	// Seen is, in a response, the source address and port the request
	// arrived from; a request's is the zero value.
	Seen netip.AddrPort
}

// Key authenticates messages.
type Key [32]byte

// NewKey derives the discovery key from the clusterset's pre-shared key,
// kept apart from the key's other uses by a label.
func NewKey(psk []byte) Key {
	m := hmac.New(sha256.New, psk)
	m.Write([]byte("snorkel nat discovery v1"))
	var k Key
	m.Sum(k[:0])
	return k
}

// Append appends m, authenticated with k, to b. IDs longer than MaxIDLen
// are cut; a request's Seen is not sent.
func (m *Message) Append(b []byte, k *Key) []byte {
	start := len(b)
	b = append(b, magic...)
	b = append(b, version, byte(m.Type))
	b = append(b, m.Nonce[:]...)
	for _, id := range []string{m.From, m.To} {
		id = id[:min(len(id), MaxIDLen)]
		b = append(b, byte(len(id)))
		b = append(b, id...)
	}
	// Requests carry the slot too, zeroed: a request is never smaller
	// than its response.
	var seen [seenLen]byte
	if m.Type == Response {
		a := m.Seen.Addr().As16()
		copy(seen[:16], a[:])
		binary.BigEndian.PutUint16(seen[16:], m.Seen.Port())
	}
	b = append(b, seen[:]...)
	return append(b, mac(k, b[start:])...)
}

func mac(k *Key, b []byte) []byte {
	h := hmac.New(sha256.New, k[:])
	h.Write(b)
	return h.Sum(nil)[:macLen]
}

// Drop is why a datagram was not taken as a message.
type Drop uint8

const (
	NotDropped Drop = iota
	DropMalformed
	DropVersion
	DropMAC
	// DropNotForUs: the receiver is another cluster.
	DropNotForUs
	// DropUnexpected: a response to no probe in flight, or from another
	// address or cluster than the one probed.
	DropUnexpected
	numDrops
)

var dropNames = [numDrops]string{"", "malformed", "version", "mac", "not_for_us", "unexpected"}

func (d Drop) String() string {
	if d < numDrops {
		return dropNames[d]
	}
	return "unknown"
}

// Parse decodes and authenticates b.
func Parse(b []byte, k *Key) (Message, Drop) {
	var m Message
	if len(b) < headerLen+2+seenLen+macLen || len(b) > MaxSize || string(b[:len(magic)]) != magic {
		return m, DropMalformed
	}
	if b[len(magic)] != version {
		return m, DropVersion
	}
	body, sum := b[:len(b)-macLen], b[len(b)-macLen:]
	if !hmac.Equal(sum, mac(k, body)) {
		return m, DropMAC
	}
	m.Type = Type(b[len(magic)+1])
	copy(m.Nonce[:], b[len(magic)+2:])
	rest := body[headerLen:]
	for _, id := range []*string{&m.From, &m.To} {
		if len(rest) < 1 || int(rest[0]) > MaxIDLen || len(rest) < 1+int(rest[0]) {
			return Message{}, DropMalformed
		}
		*id, rest = string(rest[1:1+rest[0]]), rest[1+rest[0]:]
	}
	if len(rest) != seenLen {
		return Message{}, DropMalformed
	}
	a := netip.AddrFrom16([16]byte(rest[:16])).Unmap()
	port := binary.BigEndian.Uint16(rest[16:])
	switch m.Type {
	case Request:
		if a != netip.IPv6Unspecified() || port != 0 {
			return Message{}, DropMalformed
		}
	case Response:
		m.Seen = netip.AddrPortFrom(a, port)
	default:
		return Message{}, DropMalformed
	}
	return m, NotDropped
}
