package vxlan

import (
	"sync/atomic"

	"github.com/snorkel-net/snorkel/transport"
)

// reason is why a packet was dropped; the hot path returns one instead of an
// error so that nothing is formatted per packet.
type reason uint8

const (
	accepted reason = iota
	// dropShort: the frame ends inside the VXLAN, Ethernet, IP or ARP header.
	dropShort
	// dropBadHeader: the I flag is clear (RFC 7348 §5).
	dropBadHeader
	// dropBadVNI: the VNI is not the configured one (RFC 7348 §5).
	dropBadVNI
	// dropUnknownPeer: the outer source address is no configured peer.
	dropUnknownPeer
	// dropUnsupportedEtherType: neither IPv4, IPv6 nor ARP (this includes
	// VLAN-tagged frames, which RFC 7348 §6.1 lets a VTEP discard).
	dropUnsupportedEtherType
	// dropBadIP: the IP version disagrees with the EtherType, or the IP
	// length field is inconsistent with the frame.
	dropBadIP
	// dropBadARP: an ARP packet that is not Ethernet/IPv4 (RFC 826).
	dropBadARP
	// dropARPIgnored: a well-formed ARP packet that needs no answer: a
	// reply, an announcement, or a probe (RFC 5227 §2.1.1).
	dropARPIgnored
	// dropARPReplyFailed: the ARP answer could not be sent.
	dropARPReplyFailed
	// dropTxNotIP: Send was given a packet that is neither IPv4 nor IPv6.
	dropTxNotIP
	numReasons
)

var reasonNames = [numReasons]string{
	accepted:                 "accepted",
	dropShort:                "short",
	dropBadHeader:            "bad_header",
	dropBadVNI:               "bad_vni",
	dropUnknownPeer:          "unknown_peer",
	dropUnsupportedEtherType: "unsupported_ethertype",
	dropBadIP:                "bad_ip",
	dropBadARP:               "bad_arp",
	dropARPIgnored:           "arp_ignored",
	dropARPReplyFailed:       "arp_reply_failed",
	dropTxNotIP:              "tx_not_ip",
}

func (r reason) String() string { return reasonNames[r] }

// dropRow holds a counter per reason for one sender: a peer, or the
// unknown senders (transport.PeerAny).
type dropRow [numReasons]atomic.Uint64

func (d *dropRow) add(r reason) { d[r].Add(1) }

// appendTo appends the non-zero counters to out as drops of peer.
func (d *dropRow) appendTo(out []transport.Drop, peer int) []transport.Drop {
	for r := dropShort; r < numReasons; r++ {
		if n := d[r].Load(); n != 0 {
			out = append(out, transport.Drop{Peer: peer, Reason: r.String(), Count: n})
		}
	}
	return out
}
