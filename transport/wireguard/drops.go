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
	// ReasonUnknownMessage: a UDP datagram on the port is not WireGuard.
	ReasonUnknownMessage = "unknown_message"
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
