package vxlan

import (
	"encoding/binary"
	"net/netip"
)

// ARP for IPv4 over Ethernet (RFC 826).
const (
	arpLen        = 28
	arpHWEthernet = 1
	arpRequest    = 1
	arpReply      = 2
)

// answerARP turns the ARP request in frame (a whole VXLAN datagram) into the
// reply from local, in place, and returns the reply datagram. The transport
// answers for every target address except the sender's own, because the
// gateway routes everything behind it: a kernel peer with an on-link route
// for the remote subnets resolves each next hop to this MAC. Announcements
// (target equal to sender) and probes (sender 0.0.0.0, RFC 5227 §2.1.1) are
// not answered, so that they never look like an address conflict.
func answerARP(frame []byte, vni uint32, local mac) ([]byte, reason) {
	if len(frame) < headerLen+arpLen {
		return nil, dropShort
	}
	a := frame[headerLen : headerLen+arpLen]
	if binary.BigEndian.Uint16(a[0:2]) != arpHWEthernet ||
		binary.BigEndian.Uint16(a[2:4]) != etherTypeIPv4 ||
		a[4] != 6 || a[5] != 4 {
		return nil, dropBadARP
	}
	sha := mac(a[8:14])
	spa := [4]byte(a[14:18])
	tpa := [4]byte(a[24:28])
	if binary.BigEndian.Uint16(a[6:8]) != arpRequest || spa == tpa ||
		netip.AddrFrom4(spa).IsUnspecified() || !sha.isUnicast() {
		return nil, dropARPIgnored
	}
	putVXLAN(frame, vni)
	putEthernet(frame[vxlanLen:], sha, local, etherTypeARP)
	binary.BigEndian.PutUint16(a[6:8], arpReply)
	copy(a[8:14], local[:])
	copy(a[14:18], tpa[:])
	copy(a[18:24], sha[:])
	copy(a[24:28], spa[:])
	return frame[:headerLen+arpLen], accepted
}
