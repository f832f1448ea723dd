package packet

import (
	"encoding/binary"
	"math"
	"net/netip"
)

const (
	// ipv4MinMTU is the MTU every IPv4 link must carry (RFC 791, section
	// 3.2); ipv6MinMTU is the IPv6 equivalent (RFC 8200, section 5), below
	// which a Packet Too Big must not be sent (RFC 8201, section 4).
	ipv4MinMTU = 68
	ipv6MinMTU = 1280
	// An ICMPv4 error quotes as much of the datagram as fits in 576 bytes
	// (RFC 1812, section 4.3.2.3), an ICMPv6 error as much as fits in the
	// minimum MTU (RFC 4443, section 2.4(c)).
	ipv4ErrorMaxLen = 576
	ipv6ErrorMaxLen = ipv6MinMTU
	// errorTTL is the TTL or hop limit of the errors TooBig writes.
	errorTTL = 64
	// ipv4TOSInternetControl sets IP precedence 6, which RFC 1812, section
	// 4.3.2.5 asks of ICMP errors.
	ipv4TOSInternetControl = 0xc0
)

// TooBig writes into dst an ICMPv4 "fragmentation needed" (type 3 code 4,
// next-hop MTU = mtu, RFC 1191) or an ICMPv6 "packet too big" (type 2, MTU =
// mtu, RFC 4443 section 3.2) answering orig (decoded as p), sent from `from`
// to orig's source, TTL/hop limit 64, quoting as much of orig as RFC 1812
// (576 bytes total) / RFC 4443 (1280 total) allow, with all checksums
// correct. Returns the bytes written, or 0 when no error may be sent (orig is
// itself an ICMP error, a non-first fragment, from an unspecified/multicast
// source, or dst too small). It also returns 0 when from is not of orig's IP
// version, when mtu is below the version's minimum MTU or beyond its field,
// and, for IPv4, when orig went to a multicast or broadcast address (RFC 1812,
// section 4.3.2.7); IPv6 answers those (RFC 4443, section 2.4(e.3)).
//
// Whether orig needed the error (IPv4 DF set, length above mtu) is the
// caller's decision. dst must not overlap orig. The IPv4 header reuses orig's
// identification, which is unique enough for a datagram never sent in
// fragments.
func TooBig(dst, orig []byte, p *Parsed, from netip.Addr, mtu int) int {
	if p.FragOffset != 0 || p.quoted || p.isICMPError() {
		return 0
	}
	switch p.Version {
	case 4:
		if !from.Is4() || mtu < ipv4MinMTU || mtu > math.MaxUint16 || !ipv4ErrorAllowed(p) {
			return 0
		}
		return tooBig4(dst, orig, p, from.As4(), uint16(mtu))
	case 6:
		if !from.Is6() || mtu < ipv6MinMTU || uint64(mtu) > math.MaxUint32 || !ipv6ErrorAllowed(p) {
			return 0
		}
		return tooBig6(dst, orig, p, from.As16(), uint32(mtu))
	}
	return 0
}

// ipv4ErrorAllowed applies RFC 1812, section 4.3.2.7: no error about a
// datagram sent to a multicast or limited broadcast address, or from an
// address that names no single host (this network, loopback, multicast,
// limited broadcast).
func ipv4ErrorAllowed(p *Parsed) bool {
	if notUnicast4(p.Dst) {
		return false
	}
	return p.Src[0] != 0 && p.Src[0] != 127 && !notUnicast4(p.Src)
}

// notUnicast4 reports multicast (224/4) and the limited broadcast address.
// The reserved 240/4 counts as unicast: Globalnet's default 242.0.0.0/8
// lives there, and its hosts must learn their path MTU like any other.
func notUnicast4(a [16]byte) bool {
	return a[0]&0xf0 == 224 || a[0] == 255 && a[1] == 255 && a[2] == 255 && a[3] == 255
}

// ipv6ErrorAllowed applies RFC 4443, section 2.4(e) to a Packet Too Big: no
// error to an unspecified, loopback or multicast source.
func ipv6ErrorAllowed(p *Parsed) bool {
	a := netip.AddrFrom16(p.Src)
	return !a.IsUnspecified() && !a.IsLoopback() && !a.IsMulticast()
}

func tooBig4(dst, orig []byte, p *Parsed, from [4]byte, mtu uint16) int {
	const hl = IPv4MinHeaderLen + ICMPHeaderLen
	q := min(p.Length, ipv4ErrorMaxLen-hl)
	n := hl + q
	if len(dst) < n {
		return 0
	}
	h := IPv4(dst[:IPv4MinHeaderLen])
	h[0] = 0x45
	h[1] = ipv4TOSInternetControl
	binary.BigEndian.PutUint16(h[2:], uint16(n))
	binary.BigEndian.PutUint16(h[4:], uint16(p.FragID))
	binary.BigEndian.PutUint16(h[6:], 0)
	h[8] = errorTTL
	h[9] = ProtoICMPv4
	copy(h[ipv4SrcOffset:], from[:])
	copy(h[ipv4DstOffset:], p.Src[:4])
	h.SetChecksum(h.ComputeChecksum())

	m := ICMPv4(dst[IPv4MinHeaderLen:n])
	m[0] = ICMPv4Unreachable
	m[1] = ICMPv4FragNeededCode
	binary.BigEndian.PutUint16(m[4:], 0) // unused, and no RFC 4884 length
	binary.BigEndian.PutUint16(m[6:], mtu)
	copy(m[ICMPHeaderLen:], orig[:q])
	m.SetChecksum(m.ComputeChecksum())
	return n
}

func tooBig6(dst, orig []byte, p *Parsed, from [16]byte, mtu uint32) int {
	const hl = IPv6HeaderLen + ICMPHeaderLen
	q := min(p.Length, ipv6ErrorMaxLen-hl)
	n := hl + q
	if len(dst) < n {
		return 0
	}
	h := IPv6(dst[:IPv6HeaderLen])
	binary.BigEndian.PutUint32(h[0:], 6<<28)
	binary.BigEndian.PutUint16(h[4:], uint16(ICMPHeaderLen+q))
	h[6] = ProtoICMPv6
	h[7] = errorTTL
	h.SetSrc(from)
	h.SetDst(p.Src)

	m := ICMPv6(dst[IPv6HeaderLen:n])
	m[0] = ICMPv6PacketTooBig
	m[1] = 0
	binary.BigEndian.PutUint32(m[4:], mtu)
	copy(m[ICMPHeaderLen:], orig[:q])
	m.SetChecksum(m.ComputeChecksum(PseudoHeaderChecksum(ProtoICMPv6, from[:], p.Src[:], len(m))))
	return n
}
