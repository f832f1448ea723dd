package vxlan

import "encoding/binary"

// frameKind is what a received VXLAN datagram carries.
type frameKind uint8

const (
	frameDrop frameKind = iota
	frameIP             // an IPv4 or IPv6 packet at frame[headerLen:]
	frameARP            // an ARP packet at frame[headerLen:]
)

// decoded is the result of parsing one datagram; it holds no pointers into
// the frame so that it stays on the stack.
type decoded struct {
	kind   frameKind
	reason reason // why, when kind is frameDrop
	src    mac    // inner source address
	ipLen  int    // length of the IP packet, without Ethernet padding
}

// decode parses the UDP payload of one VXLAN datagram (RFC 7348 §5) and
// checks it is meant for vni. An IP packet's length comes from its own
// header so that Ethernet padding is not passed on.
func decode(frame []byte, vni uint32) decoded {
	if len(frame) < headerLen {
		return decoded{reason: dropShort}
	}
	if frame[0]&flagI == 0 {
		return decoded{reason: dropBadHeader}
	}
	if headerVNI(frame) != vni {
		return decoded{reason: dropBadVNI}
	}
	eth := frame[vxlanLen:headerLen]
	d := decoded{src: mac(eth[6:12])}
	payload := frame[headerLen:]
	switch binary.BigEndian.Uint16(eth[12:14]) {
	case etherTypeIPv4:
		d.ipLen, d.reason = ipv4Len(payload)
		d.kind = frameIP
	case etherTypeIPv6:
		d.ipLen, d.reason = ipv6Len(payload)
		d.kind = frameIP
	case etherTypeARP:
		if len(payload) < arpLen {
			d.reason = dropShort
		}
		d.kind = frameARP
	default:
		d.reason = dropUnsupportedEtherType
	}
	if d.reason != accepted {
		d.kind = frameDrop
	}
	return d
}

// ipv4Len is the total length of the IPv4 packet p (RFC 791 §3.1).
func ipv4Len(p []byte) (int, reason) {
	const minLen = 20
	if len(p) < minLen {
		return 0, dropShort
	}
	if p[0]>>4 != 4 {
		return 0, dropBadIP
	}
	ihl := int(p[0]&0x0f) * 4
	total := int(binary.BigEndian.Uint16(p[2:4]))
	if ihl < minLen || total < ihl || total > len(p) {
		return 0, dropBadIP
	}
	return total, accepted
}

// ipv6Len is the length of the IPv6 packet p: its fixed header plus payload
// length (RFC 8200 §3). Jumbograms cannot arrive in a UDP datagram.
func ipv6Len(p []byte) (int, reason) {
	const fixedLen = 40
	if len(p) < fixedLen {
		return 0, dropShort
	}
	if p[0]>>4 != 6 {
		return 0, dropBadIP
	}
	total := fixedLen + int(binary.BigEndian.Uint16(p[4:6]))
	if total > len(p) {
		return 0, dropBadIP
	}
	return total, accepted
}
