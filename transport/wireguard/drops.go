package wireguard

import (
	"sync/atomic"

	"github.com/snorkel-net/snorkel/transport"
)

// Drop reasons reported by Drops.
const (
	// ReasonSpoofedSource: a decrypted packet's inner source address is not in
	// the sending peer's allowed IPs.
	ReasonSpoofedSource = "spoofed_source"
	// ReasonBadIPVersion: a packet is neither IPv4 nor IPv6.
	ReasonBadIPVersion = "bad_ip_version"
	// ReasonOversize: a packet handed to Send does not fit a device buffer.
	ReasonOversize = "oversize"
	// ReasonHandshakeInvalid: a handshake message failed authentication, most
	// often because one side has the other's public key wrong.
	ReasonHandshakeInvalid = "handshake_invalid"
	// ReasonHandshakeReplay: a handshake initiation repeated an old timestamp.
	ReasonHandshakeReplay = "handshake_replay"
	// ReasonHandshakeFlood: a peer initiated handshakes faster than allowed.
	ReasonHandshakeFlood = "handshake_flood"
	// ReasonUnknownMessage: a datagram of 32 bytes or more whose first four
	// bytes are not one of WireGuard's four message types (1..4 with three
	// zero reserved bytes).
	ReasonUnknownMessage = "unknown_message"
	// ReasonTooShort: a datagram shorter than the smallest WireGuard message,
	// a 32-byte keepalive.
	ReasonTooShort = "too_short"
	// ReasonBadSize: a handshake initiation, response or cookie reply whose
	// length is not that message's fixed length.
	ReasonBadSize = "bad_size"
	// ReasonBadMAC1: a handshake initiation or response whose mac1 was not
	// computed with this gateway's public key.
	ReasonBadMAC1 = "bad_mac1"
	// ReasonUnknownIndex: a response, cookie reply or transport message whose
	// receiver index is none this gateway has handed out.
	ReasonUnknownIndex = "unknown_index"
	// ReasonUnderLoad: a handshake message the device refused while under
	// load, answering with a cookie reply instead.
	ReasonUnderLoad = "under_load"
)

type reason int

const (
	reasonSpoofedSource reason = iota
	reasonBadIPVersion
	reasonOversize
	reasonHandshakeInvalid
	reasonHandshakeReplay
	reasonHandshakeFlood
	reasonUnknownMessage
	reasonTooShort
	reasonBadSize
	reasonBadMAC1
	reasonUnknownIndex
	reasonUnderLoad
	numReasons
)

var reasonNames = [numReasons]string{
	reasonSpoofedSource:    ReasonSpoofedSource,
	reasonBadIPVersion:     ReasonBadIPVersion,
	reasonOversize:         ReasonOversize,
	reasonHandshakeInvalid: ReasonHandshakeInvalid,
	reasonHandshakeReplay:  ReasonHandshakeReplay,
	reasonHandshakeFlood:   ReasonHandshakeFlood,
	reasonUnknownMessage:   ReasonUnknownMessage,
	reasonTooShort:         ReasonTooShort,
	reasonBadSize:          ReasonBadSize,
	reasonBadMAC1:          ReasonBadMAC1,
	reasonUnknownIndex:     ReasonUnknownIndex,
	reasonUnderLoad:        ReasonUnderLoad,
}

// dropCounters holds one counter per peer and reason; the last row is for
// drops whose sender is unknown.
type dropCounters struct {
	rows [][numReasons]atomic.Uint64
}

func newDropCounters(peers int) *dropCounters {
	return &dropCounters{rows: make([][numReasons]atomic.Uint64, peers+1)}
}

// add counts n drops; peer is an index into the peer list or transport.PeerAny.
func (c *dropCounters) add(peer int, r reason, n uint64) {
	if peer < 0 || peer >= len(c.rows)-1 {
		peer = len(c.rows) - 1
	}
	c.rows[peer][r].Add(n)
}

// snapshot returns the non-zero counters.
func (c *dropCounters) snapshot() []transport.Drop {
	var out []transport.Drop
	for i := range c.rows {
		peer := i
		if i == len(c.rows)-1 {
			peer = transport.PeerAny
		}
		for r := range numReasons {
			if n := c.rows[i][r].Load(); n > 0 {
				out = append(out, transport.Drop{Peer: peer, Reason: reasonNames[r], Count: n})
			}
		}
	}
	return out
}
