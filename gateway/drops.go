package gateway

// dropReason says why the gateway discarded a packet; its String is the
// `reason` label of snorkel_gateway_drops_total.
type dropReason uint8

const (
	dropMalformed      dropReason = iota // the IP header did not parse
	dropNoRoute                          // egress: no remote cluster owns the destination
	dropSpoofedSource                    // ingress: the inner source is not the sending cluster's
	dropBadDestination                   // ingress: the destination is not in this cluster
	dropTooBig                           // egress: larger than the tunnel MTU
	dropSendFailed                       // the transport refused the batch, or a probe or echo reply
	dropTUNWrite                         // ingress: the TUN device refused the batch
	dropTranslate                        // the translator refused the packet
	dropBadChecksum                      // egress: a TCP segment whose checksum does not verify
	// ingress, to the health address from a remote's healthCheckIP: not
	// an echo request or reply that can be answered or matched (bad
	// checksum, fragmented, an echo request over 1280 bytes)
	dropHealthMalformed
	dropHealthUnmatched   // ingress: an echo reply to no probe awaiting one (late or duplicate)
	dropHealthRateLimited // ingress: an echo request beyond the answers allowed per second
	numDropReasons
)

var dropNames = [numDropReasons]string{
	dropMalformed:      "malformed",
	dropNoRoute:        "no_route",
	dropSpoofedSource:  "spoofed_source",
	dropBadDestination: "bad_destination",
	dropTooBig:         "too_big",
	dropSendFailed:     "send_failed",
	dropTUNWrite:       "tun_write_failed",
	dropTranslate:      "translate",
	dropBadChecksum:    "bad_checksum",

	dropHealthMalformed:   "health_malformed",
	dropHealthUnmatched:   "health_unmatched",
	dropHealthRateLimited: "health_rate_limited",
}

func (r dropReason) String() string { return dropNames[r] }
