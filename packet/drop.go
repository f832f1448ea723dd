package packet

// DropReason says why Decode refused a packet. DropNone (zero) means the
// packet was accepted. The names returned by String are stable and meant for
// metric labels.
type DropReason uint8

// Drop reasons. New reasons are added at the end so that NumDropReasons can
// size per-reason counter arrays.
const (
	DropNone DropReason = iota
	// DropTruncated: the buffer ends before a header the packet claims.
	DropTruncated
	// DropBadVersion: the IP version is neither 4 nor 6.
	DropBadVersion
	// DropBadHeaderLength: the IPv4 IHL is below 5 (RFC 791, section 3.1).
	DropBadHeaderLength
	// DropBadTotalLength: the IPv4 total length is smaller than its header.
	DropBadTotalLength
	// DropBadIPChecksum: the IPv4 header checksum does not verify; a router
	// must discard such packets (RFC 1812, section 5.2.2).
	DropBadIPChecksum
	// DropBadExtensionHeader: an IPv6 Hop-by-Hop Options header that is not
	// first, or a second Fragment header (RFC 8200, section 4.1).
	DropBadExtensionHeader
	// DropBadFragment: a fragment that overruns 65535 bytes once
	// reassembled, a non-last fragment whose length is not a multiple of 8
	// (RFC 8200, section 4.5), or a TCP fragment at offset 1, which can
	// overwrite the TCP flags of the first fragment (RFC 1858, section 3.2).
	DropBadFragment
	// DropBadTCPHeader: the TCP data offset is below 5 words.
	DropBadTCPHeader
	// DropBadUDPLength: the UDP length is below 8 or beyond the IP payload.
	DropBadUDPLength

	numDropReasons
)

// NumDropReasons is the number of DropReason values, DropNone included.
const NumDropReasons = int(numDropReasons)

var dropReasonNames = [NumDropReasons]string{
	DropNone:               "none",
	DropTruncated:          "truncated",
	DropBadVersion:         "bad_version",
	DropBadHeaderLength:    "bad_header_length",
	DropBadTotalLength:     "bad_total_length",
	DropBadIPChecksum:      "bad_ip_checksum",
	DropBadExtensionHeader: "bad_extension_header",
	DropBadFragment:        "bad_fragment",
	DropBadTCPHeader:       "bad_tcp_header",
	DropBadUDPLength:       "bad_udp_length",
}

// String returns the snake_case name of r, or "unknown" for a value outside
// the defined set.
func (r DropReason) String() string {
	if int(r) < len(dropReasonNames) {
		return dropReasonNames[r]
	}
	return "unknown"
}
