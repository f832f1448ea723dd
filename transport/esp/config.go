package esp

import (
	"fmt"
	"net/netip"
	"time"
)

// Defaults for the zero values of Config.
const (
	// DefaultPort is the IKE NAT-traversal port, which ESP-in-UDP shares
	// (RFC 3948 §2, RFC 7296 §2.23).
	DefaultPort = 4500
	// DefaultKeepaliveInterval is the NAT-keepalive interval RFC 3948
	// recommends.
	DefaultKeepaliveInterval = 20 * time.Second
)

// minKeepaliveInterval keeps a mistyped interval from flooding the path.
const minKeepaliveInterval = 10 * time.Millisecond

// Config describes one ESP transport.
type Config struct {
	// Port is the local UDP port, shared by ESP and IKE, and the port of a
	// peer whose Endpoint has none; 0 means DefaultPort.
	Port uint16
	// Peers are the remote gateways at start; a peer's index here is the
	// peer number of Send, Deliver and ike.ChildSA.Peer. There may be
	// none: SetPeer and RemovePeer change the set while the transport runs.
	Peers []Peer
	// KeepaliveInterval is how often a NAT-keepalive goes to each peer
	// that has an outbound SA; 0 means DefaultKeepaliveInterval.
	KeepaliveInterval time.Duration
}

// Peer is one remote gateway.
type Peer struct {
	// Endpoint is where ESP, IKE and keepalives for the peer are sent,
	// until SetEndpoint moves it. Received ESP is matched to the peer by
	// SPI, not by address.
	Endpoint netip.AddrPort
}

// settings is a validated Config with defaults applied.
type settings struct {
	port      uint16
	endpoints []netip.AddrPort
	keepalive time.Duration
}

func (c Config) validate() (settings, error) {
	s := settings{port: c.Port, keepalive: c.KeepaliveInterval}
	if s.port == 0 {
		s.port = DefaultPort
	}
	switch {
	case s.keepalive == 0:
		s.keepalive = DefaultKeepaliveInterval
	case s.keepalive < minKeepaliveInterval:
		return s, fmt.Errorf("esp: KeepaliveInterval %v: must be at least %v (RFC 3948 recommends %v); 0 means the default", c.KeepaliveInterval, minKeepaliveInterval, DefaultKeepaliveInterval)
	}
	seen := make(map[netip.AddrPort]int, len(c.Peers))
	for i, p := range c.Peers {
		ep, err := endpoint(p.Endpoint, s.port)
		if err != nil {
			return s, fmt.Errorf("esp: Peers[%d].Endpoint %w", i, err)
		}
		if j, dup := seen[ep]; dup {
			return s, fmt.Errorf("esp: Peers[%d].Endpoint %v: already the endpoint of Peers[%d]; each peer is one remote gateway", i, ep, j)
		}
		seen[ep] = i
		s.endpoints = append(s.endpoints, ep)
	}
	return s, nil
}

// endpoint checks a peer endpoint and gives it defaultPort if it has none.
// An IPv4-mapped IPv6 address becomes plain IPv4, as the socket reports
// senders.
func endpoint(ep netip.AddrPort, defaultPort uint16) (netip.AddrPort, error) {
	a := ep.Addr().Unmap()
	if !a.IsValid() || a.IsUnspecified() || a.IsMulticast() {
		return netip.AddrPort{}, fmt.Errorf("%v: want a unicast address and port", ep)
	}
	port := ep.Port()
	if port == 0 {
		port = defaultPort
	}
	return netip.AddrPortFrom(a, port), nil
}
