package esp

import "github.com/snorkel-net/snorkel/transport"

// ESP packet layout (RFC 4303 §2):
//
//	SPI (4) | Sequence Number (4) | IV | ciphertext | ICV (16)
//
// where the ciphertext is payload | padding | pad length (1) | next header (1).
const (
	espHeaderLen = 8
	gcmIVLen     = 8  // RFC 4106 §3.1
	cbcIVLen     = 16 // RFC 3602 §3: one AES block
	maxIVLen     = cbcIVLen
	trailerLen   = 2 // pad length and next header
	// icvLen is the ICV of both suites: GCM's 16-byte tag (RFC 4106 §6)
	// and HMAC-SHA-256 truncated to 128 bits (RFC 4868 §2.3).
	icvLen = 16
)

// scratchLen is the memory sealing and opening work in: the GCM nonce and
// ESN AAD (24 bytes), or the full HMAC-SHA-256 output (32).
const scratchLen = 32

// scratch is that memory. Sealing takes it from the headroom before the
// ESP header; opening, which works in place among the segments of a
// coalesced datagram, where the bytes before a datagram are the end of
// the one before it, takes it from its receive loop.
type scratch [scratchLen]byte

// sealHeadroom is the headroom Send needs before each packet: the largest
// ESP header and IV, and scratch before them.
const sealHeadroom = espHeaderLen + maxIVLen + scratchLen

// rxOffset is where the socket writes each datagram: the inner packet
// behind the shortest header (GCM's) lands exactly at transport.Headroom,
// and every suite's at or after it.
const rxOffset = transport.Headroom - espHeaderLen - gcmIVLen

// A compile-time check of the layout: Send's headroom fits in the
// gateway's.
const _ = uint(transport.Headroom - sealHeadroom)

// Next header values of tunnel mode (IANA protocol numbers).
const (
	nextIPv4 = 4
	nextIPv6 = 41
)

// UDP encapsulation (RFC 3948 §2).
const (
	// markerLen is the non-ESP marker: four zero bytes where an ESP packet
	// has its SPI, which is never zero (§2.2).
	markerLen = 4
	// keepaliveByte is the whole payload of a NAT-keepalive (§2.3).
	keepaliveByte = 0xff
)

// Underlay headers outside ESP.
const (
	ipv4HeaderLen = 20
	ipv6HeaderLen = 40
	udpHeaderLen  = 8
)

// nextHeaderOf is the next header value that announces the packet
// b[offset:] in tunnel mode, or 0 when there is none or it is neither IPv4
// nor IPv6.
func nextHeaderOf(b []byte, offset int) byte {
	if len(b) <= offset {
		return 0
	}
	switch b[offset] >> 4 {
	case 4:
		return nextIPv4
	case 6:
		return nextIPv6
	}
	return 0
}

// innerIP reports whether pkt is an IP packet of the version that next
// announces, at least as long as its fixed header. A next header of 59 (a
// dummy packet, RFC 4303 §2.6) or anything else is refused.
func innerIP(pkt []byte, next byte) bool {
	switch next {
	case nextIPv4:
		return len(pkt) >= ipv4HeaderLen && pkt[0]>>4 == 4
	case nextIPv6:
		return len(pkt) >= ipv6HeaderLen && pkt[0]>>4 == 6
	}
	return false
}

// putTrailer writes padding, pad length and next header after the payload
// p[:n], filling p, whose length is the padded one. The padding is 1, 2,
// 3, … (RFC 4303 §2.4).
func putTrailer(p []byte, n int, next byte) {
	pad := len(p) - n - trailerLen
	for i := range pad {
		p[n+i] = byte(i + 1)
	}
	p[len(p)-2] = byte(pad)
	p[len(p)-1] = next
}

// trailer checks the padding and pad length at the end of the decrypted
// ciphertext p and returns the payload length and the next header. The
// padding must be 1, 2, 3, …, as RFC 4303 §2.4 has the sender write it and
// the receiver check it.
func trailer(p []byte) (int, byte, reason) {
	pad := int(p[len(p)-2])
	n := len(p) - trailerLen - pad
	if n < 0 {
		return 0, 0, dropBadPadding
	}
	for i, v := range p[n : n+pad] {
		if v != byte(i+1) {
			return 0, 0, dropBadPadding
		}
	}
	return n, p[len(p)-1], accepted
}

// paddedLen is the ciphertext length for a payload of n bytes: payload and
// trailer rounded up to align, a power of two.
func paddedLen(n, align int) int {
	return (n + trailerLen + align - 1) &^ (align - 1)
}
