// Package ike is the IKEv2 key exchange (RFC 7296) that keys Snorkel's
// userspace ESP data plane: it authenticates remote gateways with a
// pre-shared key, negotiates CHILD_SAs in tunnel mode for the local and
// remote cluster CIDRs, rekeys them before their time, byte or sequence
// number limits, and notices dead peers.
//
// All IKE messages travel on the data plane's UDP port (4500, RFC 7296
// §2.23); the socket owner strips and adds the non-ESP marker (RFC 3948
// §2.2), calls Engine.Receive with each IKE message and sends the engine's
// messages through a Sender. The engine always claims to be behind a NAT so
// that peers encapsulate ESP in UDP, the only form the data plane speaks.
// Peers are known by address: an IKE_SA_INIT from any other is dropped
// before any work is done; past CookieThreshold half-open SAs even known
// addresses must return a cookie first, which costs the engine an HMAC and
// no state (RFC 7296 §2.6); past HalfOpenLimit none is answered; and a
// half-open SA expires once its IKE_AUTH could no longer arrive. Every
// message discarded is counted by reason (DropReason) through the
// DataPlane, if it is a DropCounter, and not logged.
//
// Peers change while the engine runs: SetPeer adds one or changes its
// endpoint, identity, role or traffic selectors, and RemovePeer deletes
// its SAs, each touching that peer alone (see SetPeer for what each change
// does). Peer numbers may be sparse; a number freed by RemovePeer starts
// clean when it is set again.
//
// Concurrency: Receive may be called from any goroutine; it copies the
// message and queues it for Run. Run handles each message and timer with
// the engine's lock held, which SetPeer and RemovePeer take too, so they
// may be called from any goroutine, before, while or after Run runs; the
// engine calls the DataPlane and the Sender only with that lock held. Each
// SendIKE gets a copy of the message that the Sender may keep or write
// into. Status may be called at any time.
//
// Allocation: IKE is the control path; messages are parsed into fresh
// structures and nothing here runs per data packet.
//
// Logging: established and deleted SAs are logged at Info, failures at
// Warn, once a minute while the same failure repeats; each also sets the
// peer's PeerStatus.LastError. Neither the PSK nor any derived key or
// nonce appears in a log line, an error or Status.
package ike
