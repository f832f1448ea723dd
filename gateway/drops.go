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
	dropSendFailed                       // egress: the transport refused the batch
	dropTUNWrite                         // ingress: the TUN device refused the batch
	dropTranslate                        // the translator refused the packet
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
}

func (r dropReason) String() string { return dropNames[r] }
