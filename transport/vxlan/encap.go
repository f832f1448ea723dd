package vxlan

// encap writes the VXLAN and Ethernet headers into the headroom before the
// IP packet b[offset:] and returns the datagram, b[offset-headerLen:]. The
// EtherType follows the IP version (RFC 7348 §5, "Ethertype of the original
// payload"). It reports false, writing nothing, for a packet that is not IP.
// offset must be at least headerLen.
func encap(b []byte, offset int, vni uint32, dst, src mac) ([]byte, bool) {
	if len(b) <= offset {
		return nil, false
	}
	var etherType uint16
	switch b[offset] >> 4 {
	case 4:
		etherType = etherTypeIPv4
	case 6:
		etherType = etherTypeIPv6
	default:
		return nil, false
	}
	f := b[offset-headerLen:]
	putVXLAN(f, vni)
	putEthernet(f[vxlanLen:], dst, src, etherType)
	return f, true
}
