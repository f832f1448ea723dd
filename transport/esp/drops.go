package esp

import (
	"sync/atomic"

	"github.com/snorkel-net/snorkel/transport"
	"github.com/snorkel-net/snorkel/transport/esp/ike"
)

// reason is why a packet was not delivered or sent; the hot paths return
// one instead of an error so that nothing is formatted per packet.
type reason uint8

const (
	accepted reason = iota
	// dropTruncated: a datagram too short for the ESP header, IV, trailer
	// and ICV of its SA, or of 1 to 3 bytes that is no keepalive.
	dropTruncated
	// dropMalformed: a CBC ciphertext that is not whole blocks.
	dropMalformed
	// dropUnknownSPI: no inbound SA has the packet's SPI.
	dropUnknownSPI
	// dropReplay: a sequence number already received, older than the
	// window, zero, or whose inferred ESN high bits would leave the 64-bit
	// range (RFC 4303 §3.4.3).
	dropReplay
	// dropAuthFailed: the ICV did not verify.
	dropAuthFailed
	// dropBadPadding: an authenticated packet whose pad length exceeds its
	// payload or whose padding is not 1, 2, 3, … (RFC 4303 §2.4).
	dropBadPadding
	// dropNotIP: an authenticated packet whose next header is not IPv4 or
	// IPv6 (this includes dummy packets, RFC 4303 §2.6) or disagrees with
	// the inner packet.
	dropNotIP
	// dropIKEUnhandled: an IKE message arrived before SetIKEHandler.
	dropIKEUnhandled
	// dropKeepalive: a NAT-keepalive (RFC 3948 §2.3), consumed as
	// expected; counted so that a peer's liveness is visible.
	dropKeepalive
	// dropNoSA: Send for a peer without an outbound SA.
	dropNoSA
	// dropSeqExhausted: the outbound SA has used its last sequence number
	// (RFC 4303 §3.3.3); IKE must rekey.
	dropSeqExhausted
	// dropTxNotIP: Send was given a packet that is neither IPv4 nor IPv6.
	dropTxNotIP
	// dropNoTailroom: a packet to Send whose buffer has no capacity for
	// its padding and ICV.
	dropNoTailroom
	// dropKeepaliveFailed: a NAT-keepalive could not be sent.
	dropKeepaliveFailed
	numReasons
)

var reasonNames = [numReasons]string{
	accepted:            "accepted",
	dropTruncated:       "truncated",
	dropMalformed:       "malformed",
	dropUnknownSPI:      "unknown_spi",
	dropReplay:          "replay",
	dropAuthFailed:      "auth_failed",
	dropBadPadding:      "bad_padding",
	dropNotIP:           "not_ip",
	dropIKEUnhandled:    "ike_unhandled",
	dropKeepalive:       "keepalive",
	dropNoSA:            "no_sa",
	dropSeqExhausted:    "seq_exhausted",
	dropTxNotIP:         "tx_not_ip",
	dropNoTailroom:      "no_tailroom",
	dropKeepaliveFailed: "keepalive_failed",
}

func (r reason) String() string { return reasonNames[r] }

// dropRow holds the counters of one peer, or of datagrams whose peer is
// unknown (transport.PeerAny): the transport's and the IKE engine's.
type dropRow struct {
	esp [numReasons]atomic.Uint64
	ike [ike.NumDropReasons]atomic.Uint64
}

func (d *dropRow) add(r reason, n uint64) { d.esp[r].Add(n) }

// list appends the non-zero counters, as those of peer; the engine's
// reasons are prefixed "ike_".
func (d *dropRow) list(out []transport.Drop, peer int) []transport.Drop {
	for r := dropTruncated; r < numReasons; r++ {
		if n := d.esp[r].Load(); n != 0 {
			out = append(out, transport.Drop{Peer: peer, Reason: r.String(), Count: n})
		}
	}
	for r := range ike.NumDropReasons {
		if n := d.ike[r].Load(); n != 0 {
			out = append(out, transport.Drop{Peer: peer, Reason: "ike_" + r.String(), Count: n})
		}
	}
	return out
}

// dropsOf is the drop row of peer, or the unknown peer's if there is no
// such peer.
func (t *Transport) dropsOf(peer int) *dropRow {
	if p := t.peer(peer); p != nil {
		return &p.drops
	}
	return &t.unknown
}
