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

// dropRow holds a counter per reason for one sender.
type dropRow [numReasons]atomic.Uint64

// dropCounters holds a row per peer number and one for drops whose sender
// is unknown. The filter, the log sink and the pipe count without locking;
// a peer that comes or goes replaces the slice of rows.
type dropCounters struct {
	// peers is indexed by peer number, nil where there is no peer.
	peers atomic.Pointer[[]*dropRow]
	any   dropRow
}

func newDropCounters(peers int) *dropCounters {
	rows := make([]*dropRow, peers)
	for i := range rows {
		rows[i] = new(dropRow)
	}
	c := &dropCounters{}
	c.peers.Store(&rows)
	return c
}

// add counts n drops; peer is a peer number or transport.PeerAny. Drops
// from a number with no peer count as from an unknown sender.
func (c *dropCounters) add(peer int, r reason, n uint64) {
	row := &c.any
	if rows := *c.peers.Load(); peer >= 0 && peer < len(rows) && rows[peer] != nil {
		row = rows[peer]
	}
	row[r].Add(n)
}

// reset gives peer i a row of zeros if open, else no row. Callers
// serialise: the Transport calls it under its mutex.
func (c *dropCounters) reset(i int, open bool) {
	old := *c.peers.Load()
	rows := make([]*dropRow, max(len(old), i+1))
	copy(rows, old)
	rows[i] = nil
	if open {
		rows[i] = new(dropRow)
	}
	for len(rows) > 0 && rows[len(rows)-1] == nil {
		rows = rows[:len(rows)-1]
	}
	c.peers.Store(&rows)
}

// snapshot returns the non-zero counters, peers by number, then PeerAny.
func (c *dropCounters) snapshot() []transport.Drop {
	var out []transport.Drop
	appendRow := func(peer int, row *dropRow) {
		for r := range numReasons {
			if n := row[r].Load(); n > 0 {
				out = append(out, transport.Drop{Peer: peer, Reason: reasonNames[r], Count: n})
			}
		}
	}
	for i, row := range *c.peers.Load() {
		if row != nil {
			appendRow(i, row)
		}
	}
	appendRow(transport.PeerAny, &c.any)
	return out
}
