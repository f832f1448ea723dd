package transport

// The transports a gateway can use, by the one name the gateway config's
// transport.type, the broker's cable driver and the agent all give them.
const (
	WireGuard = "wireguard"
	ESP       = "esp"
	VXLAN     = "vxlan"
)

// Kinds lists every transport, in the order tools show them.
var Kinds = []string{WireGuard, ESP, VXLAN}
