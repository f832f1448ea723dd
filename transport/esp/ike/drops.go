package ike

// DropReason is why the engine discarded a received IKE message: one that
// set up or advanced no state, whether or not it was answered.
type DropReason uint8

const (
	// DropQueueFull: Run had not caught up with the messages before it.
	DropQueueFull DropReason = iota
	// DropOversize: a message longer than any the engine builds.
	DropOversize
	// DropTruncated: shorter than the IKE header (RFC 7296 §3.1).
	DropTruncated
	// DropBadVersion: a major version other than 2 (RFC 7296 §2.5).
	DropBadVersion
	// DropMalformed: a header or payload chain that breaks the wire format,
	// an IKE_SA_INIT request with a responder SPI or message ID, or one
	// without SA, KE and Nonce (answered with INVALID_SYNTAX).
	DropMalformed
	// DropUnsupportedCritical: a payload unknown here with the critical bit
	// set, answered with UNSUPPORTED_CRITICAL_PAYLOAD (RFC 7296 §2.5).
	DropUnsupportedCritical
	// DropUnknownPeer: an IKE_SA_INIT request from an address that is no
	// configured peer's.
	DropUnknownPeer
	// DropUnknownIKESPI: no IKE SA has the message's SPI.
	DropUnknownIKESPI
	// DropSAMismatch: the SPIs or the initiator flag do not fit the IKE SA
	// the message names, or the SA has no keys yet.
	DropSAMismatch
	// DropIntegrity: an SK payload whose ICV does not verify or that does
	// not decrypt (RFC 7296 §3.14).
	DropIntegrity
	// DropUnexpectedID: a request outside the window, a response to no
	// request of ours, or an IKE_SA_INIT response we no longer wait for
	// (RFC 7296 §2.3).
	DropUnexpectedID
	// DropRetransmit: a request already answered; the answer is sent again
	// (RFC 7296 §2.1).
	DropRetransmit
	// DropBadExchange: a request of an exchange type this engine does not
	// speak.
	DropBadExchange
	// DropCookieRequired: an IKE_SA_INIT request without a cookie while
	// cookies are required, answered with a COOKIE (RFC 7296 §2.6).
	DropCookieRequired
	// DropInvalidCookie: an IKE_SA_INIT request whose cookie this engine
	// did not make or made with a retired secret, answered with a fresh
	// COOKIE.
	DropInvalidCookie
	// DropHalfOpenLimit: an IKE_SA_INIT request with a valid cookie while
	// HalfOpenLimit SAs are half open.
	DropHalfOpenLimit
	// DropNoProposal: an IKE_SA_INIT request whose offer fits none of
	// IKEProposals, answered with NO_PROPOSAL_CHOSEN or INVALID_KE_PAYLOAD.
	DropNoProposal
	// DropBadKE: a key exchange that is no valid public value of its group.
	DropBadKE
	// DropSimultaneous: a peer's IKE_SA_INIT while ours to it, with the
	// higher nonce, goes on.
	DropSimultaneous
	// NumDropReasons is the number of reasons, all below it.
	NumDropReasons
)

var dropNames = [NumDropReasons]string{
	DropQueueFull:           "queue_full",
	DropOversize:            "oversize",
	DropTruncated:           "truncated",
	DropBadVersion:          "bad_version",
	DropMalformed:           "malformed",
	DropUnsupportedCritical: "unsupported_critical",
	DropUnknownPeer:         "unknown_peer",
	DropUnknownIKESPI:       "unknown_ike_spi",
	DropSAMismatch:          "sa_mismatch",
	DropIntegrity:           "integrity_failed",
	DropUnexpectedID:        "unexpected_id",
	DropRetransmit:          "retransmit",
	DropBadExchange:         "bad_exchange",
	DropCookieRequired:      "cookie_required",
	DropInvalidCookie:       "invalid_cookie",
	DropHalfOpenLimit:       "half_open_limit",
	DropNoProposal:          "no_proposal",
	DropBadKE:               "bad_ke",
	DropSimultaneous:        "simultaneous",
}

// String is the reason's stable label, as metrics show it.
func (r DropReason) String() string { return dropNames[r] }

// DropCounter is a DataPlane that also counts the IKE messages the engine
// discards, so that they are listed beside its own drops. peer is the index
// of the peer the message came from, or -1 where none is known. It is called
// from Receive's callers and from Run, so it must be safe for concurrent
// use, and cheap.
type DropCounter interface {
	CountIKEDrop(peer int, r DropReason)
}

// dropped counts one discarded message from peer p, nil if unknown.
func (e *Engine) dropped(p *peer, r DropReason) {
	idx := -1
	if p != nil {
		idx = p.idx
	}
	e.droppedAt(idx, r)
}

func (e *Engine) droppedAt(peer int, r DropReason) {
	if e.drops != nil {
		e.drops.CountIKEDrop(peer, r)
	}
}
