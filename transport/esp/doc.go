// Package esp is the IPsec transport: ESP (RFC 4303) in tunnel mode,
// carried in UDP (RFC 3948) so that it needs no raw socket and crosses NATs,
// and keyed by an IKEv2 engine through the ike.DataPlane interface.
//
// # Wire format
//
// Every datagram on the UDP port (default 4500) is one of three things,
// told apart by its first bytes (RFC 3948 §2):
//
//	0xFF                                    NAT-keepalive (§2.3), one byte
//	00 00 00 00 | IKE message               non-ESP marker (§2.2), then IKEv2
//	SPI (≠0) | Seq | IV | ciphertext | ICV  ESP (RFC 4303 §2)
//
// The ciphertext is the inner IPv4 or IPv6 packet followed by padding
// (1, 2, 3, …), the pad length and the next header (4 for IPv4, 41 for
// IPv6), padded so that it fills whole cipher blocks and ends on a 4-byte
// boundary (RFC 4303 §2.4). Two suites are supported:
//
//   - AES-GCM with a 16-byte ICV (RFC 4106), 128- or 256-bit keys: an 8-byte
//     IV, which is the 64-bit sequence number; the nonce is the 4-byte salt
//     and the IV; the AAD is SPI and sequence number, with ESN the SPI, the
//     high and the low 32 bits (RFC 4106 §5).
//   - AES-CBC (RFC 3602) with HMAC-SHA-256-128 (RFC 4868), for peers without
//     GCM: a 16-byte IV, the sequence number encrypted under a random key of
//     the SA's own; the ICV covers SPI, sequence number, IV and ciphertext,
//     with ESN followed by the high 32 bits of the sequence number
//     (RFC 4303 §2.2.1).
//
// With extended sequence numbers only the low 32 bits travel; the receiver
// infers the high ones from its replay window (RFC 4303 Appendix A2.2).
//
// # Receive path
//
// Keepalives are counted and discarded. IKE messages go, marker stripped, to
// the handler set with SetIKEHandler. ESP packets are matched to an inbound
// SA by SPI alone, through a lock-free read of an immutable map that
// InstallChild and DeleteChild replace; the packet's sequence number is
// checked against the SA's anti-replay window (RFC 6479 bitmap, 1984
// packets) before decryption, and entered into it only once the ICV has
// verified. The inner packet is delivered with the peer index of its SA,
// whatever the outer source address: the keys, not the address, say who
// sent it, and a NAT may rebind the peer's port at any moment. A packet
// that opens from an address or port other than the peer's endpoint moves
// the endpoint there, as the last valid authenticated packet does in
// RFC 7296 §2.23 and as WireGuard roams; the move is counted (Moved) and
// reported to the handler set with SetMoveHandler. The IKE engine moves it
// too (SetEndpoint) once an authenticated IKE message arrives from a new
// address.
//
// # Peers
//
// Peers are numbered; Config.Peers gives the first ones, and there may be
// none. SetPeer adds a peer under any free number or moves an existing
// one's endpoint, keeping its SAs; RemovePeer uninstalls its CHILD_SAs and
// frees the number, which a later SetPeer gives to a new peer with no SAs
// and no drops counted. Neither touches the socket or any other peer. The
// peer table is a snapshot behind an atomic pointer, replaced whole on a
// change, so Send and the receive path read it without a lock; a batch
// being sent or opened during RemovePeer may still go out or be delivered.
//
// # Send path
//
// Send seals each packet in place with the peer's current outbound SA and
// sends the batch. InstallChild is make-before-break: the new inbound SA
// accepts at once, the peer's outbound SA switches to the new one, and the
// old inbound SA keeps accepting until DeleteChild. The outbound sequence
// number is reserved atomically per batch and never passes 2^32-1 (2^64-1
// with ESN): what would is dropped and counted; the engine rekeys before
// then, watching Stats. A NAT-keepalive goes to each peer with an
// outbound SA every KeepaliveInterval.
//
// # Allocation and concurrency
//
// Sealing, opening, Send and the receive path allocate nothing per packet
// or per batch: encryption is in place, the ESP header is written into the
// headroom before each packet (transport.Headroom), padding and ICV into
// the tailroom after it, and sealing's scratch (GCM nonce and ESN AAD, the
// HMAC output) into the headroom before the ESP header. Opening works in
// place where the socket put each segment of a coalesced datagram, so it
// writes only within the datagram: its scratch is the receive loop's. HMAC
// states, scratch and batch slices come from pools. Send may be called from any number of
// goroutines; the receive path runs on one goroutine per socket family, so
// Deliver and the IKE handler may be called concurrently. InstallChild,
// DeleteChild, Stats, SetPeer and RemovePeer are serialised among
// themselves; they and SetEndpoint publish with atomic stores and never
// block the packet paths.
// Close waits for every goroutine of the transport, so Deliver is not
// called after it returns.
//
// # What is counted
//
// Drops lists, by peer and reason, every datagram received and every packet
// given to Send that was neither delivered nor sent: truncated, malformed,
// unknown_spi, replay, auth_failed, bad_padding, not_ip, ike_unhandled and
// keepalive on receive; no_sa, seq_exhausted, tx_not_ip, no_tailroom and
// keepalive_failed on send. A keepalive is expected traffic, not a fault: it
// is listed because it is consumed without being delivered. An IKE engine
// given the transport as its DataPlane counts here too, through
// CountIKEDrop, every IKE message it discards, as ike_<reason> (see
// ike.DropReason). What the kernel discarded at the port's socket before the
// transport read it, a full receive queue most of all, is counted for
// unknown senders as kernel_dropped (udp.Conn.KernelDrops). So every
// datagram sent at the port is either delivered, advances IKE, or is
// counted. Stats reports
// bytes, the last sequence number and the time of the last packet per
// CHILD_SA.
package esp
