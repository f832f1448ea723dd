package ike

import "net/netip"

// Transform identifiers from the IANA "IKEv2 Parameters" registry that a
// CHILD_SA can carry (RFC 7296 section 3.3.2, RFC 4106, RFC 4868).
const (
	EncrAESCBC   = 12 // ENCR_AES_CBC, with an integrity transform
	EncrAESGCM16 = 20 // ENCR_AES_GCM_16, combined mode: no integrity transform

	IntegNone           = 0
	IntegHMACSHA256_128 = 12 // AUTH_HMAC_SHA2_256_128
)

// Transform is the protection a CHILD_SA negotiated.
type Transform struct {
	Encr    uint16 // EncrAESGCM16 or EncrAESCBC
	KeyBits int    // 128 or 256
	Integ   uint16 // IntegNone with GCM, IntegHMACSHA256_128 with CBC
	ESN     bool   // extended (64-bit) sequence numbers
}

// Keys are the keys of one direction of a CHILD_SA, taken from KEYMAT in
// the order RFC 7296 section 2.17 gives: the encryption key first (for AES-GCM
// followed by its 4-byte salt, RFC 4106 section 8.1), then the integrity key.
type Keys struct {
	Encr  []byte
	Integ []byte // empty for AES-GCM
}

// ChildSA is a CHILD_SA that IKE negotiated: a pair of ESP security
// associations, one per direction, in tunnel mode.
type ChildSA struct {
	// Peer is the index of the remote gateway in the engine's peer list.
	Peer int
	// InSPI is the SPI the peer puts on the packets it sends us; OutSPI
	// the one we put on the packets we send it.
	InSPI, OutSPI uint32
	Transform     Transform
	In, Out       Keys
	// LocalTS and RemoteTS are the traffic selectors agreed, as prefixes.
	LocalTS, RemoteTS []netip.Prefix
	// Deferred keeps the peer's current outbound SA, if it has one, in use
	// until a packet opens on this CHILD_SA's inbound SA — proof that the
	// peer has installed it — or the current one is deleted. The responder
	// of an exchange sets it: its first packets on the new SA could reach
	// the initiator before its answer does (RFC 7296 §2.8).
	Deferred bool
}

// SAStats is what the data plane has seen of one CHILD_SA, which the engine
// uses to rekey before a byte lifetime or the sequence number space runs out
// and to tell a live peer from a dead one.
type SAStats struct {
	OutBytes, InBytes uint64
	OutSeq            uint64 // the last sequence number sent
	LastIn            int64  // Unix nanoseconds of the last packet that opened, 0 if none
}

// DataPlane is the ESP side that IKE keys. The engine calls it from its own
// goroutine.
type DataPlane interface {
	// InstallChild adds c. Its inbound SA accepts packets at once; its
	// outbound SA replaces the peer's current one for sending, at once or,
	// if c.Deferred, once the peer is seen to use c. A rekey is thus
	// make-before-break: the old inbound SA keeps accepting until
	// DeleteChild.
	InstallChild(c ChildSA) error
	// DeleteChild removes the CHILD_SA of peer whose inbound SPI is inSPI.
	DeleteChild(peer int, inSPI uint32)
	// Stats reports on the CHILD_SA of peer whose inbound SPI is inSPI;
	// false when there is none.
	Stats(peer int, inSPI uint32) (SAStats, bool)
}

// Sender sends one IKE message to a peer over the shared UDP port; the
// owner of the socket prepends the non-ESP marker (RFC 3948 section 2.2).
type Sender interface {
	SendIKE(to netip.AddrPort, msg []byte) error
}

// Mover is implemented by a data plane that sends to each peer at an
// endpoint of its own: the engine moves it when an authenticated IKE
// message arrives from another address or port (RFC 7296 §2.23).
type Mover interface {
	SetEndpoint(peer int, ep netip.AddrPort) error
}
