package vxlan

import "encoding/binary"

// VXLAN header, RFC 7348 §5:
//
//	|R|R|R|R|I|R|R|R|            Reserved                           |
//	|                VXLAN Network Identifier (VNI) |   Reserved    |
const (
	vxlanLen = 8
	flagI    = 0x08 // the I flag: the VNI is valid (RFC 7348 §5)
	maxVNI   = 1<<24 - 1
)

// Inner Ethernet header (RFC 7348 §5, "Inner Ethernet Header"); VLAN tags
// are not carried.
const (
	ethLen        = 14
	etherTypeIPv4 = 0x0800
	etherTypeARP  = 0x0806
	etherTypeIPv6 = 0x86DD
)

// headerLen is what the transport writes before each inner IP packet.
const headerLen = vxlanLen + ethLen

// putVXLAN writes a VXLAN header with the I flag set and every reserved
// field zero, as RFC 7348 §5 requires of a sender.
func putVXLAN(b []byte, vni uint32) {
	_ = b[vxlanLen-1]
	binary.BigEndian.PutUint32(b[0:4], flagI<<24)
	binary.BigEndian.PutUint32(b[4:8], vni<<8)
}

// putEthernet writes an Ethernet II header.
func putEthernet(b []byte, dst, src mac, etherType uint16) {
	_ = b[ethLen-1]
	copy(b[0:6], dst[:])
	copy(b[6:12], src[:])
	binary.BigEndian.PutUint16(b[12:14], etherType)
}

// headerVNI reads the VNI of a VXLAN header, ignoring the reserved bits as
// RFC 7348 §5 asks of a receiver.
func headerVNI(b []byte) uint32 {
	return binary.BigEndian.Uint32(b[4:8]) >> 8
}
