package vxlan

import (
	"fmt"
	"net"
	"net/netip"
)

// Defaults for the zero values of Config.
const (
	DefaultPort = 4500
	DefaultVNI  = 1000
)

// Config describes one VXLAN transport.
type Config struct {
	// Port is the local UDP port and the port peers listen on unless their
	// Endpoint says otherwise; 0 means DefaultPort.
	Port uint16
	// VNI is the VXLAN network identifier sent and required on receipt
	// (24 bits, RFC 7348 §5); 0 means DefaultVNI.
	VNI uint32
	// MAC is the inner source address of every frame sent and the answer to
	// ARP requests. Empty means one derived from Name, VNI and port.
	MAC net.HardwareAddr
	// Name identifies this endpoint when MAC is empty: the derived MAC is a
	// hash of it, the VNI and the port. Default the host name; gateways that
	// share a host need distinct names (a kernel peer ignores frames that
	// carry its own MAC as their source).
	Name string
	// Peers are the remote tunnel endpoints; a peer's index here is the
	// peer number of Send and Deliver.
	Peers []Peer
}

// Peer is one remote VXLAN tunnel endpoint (VTEP).
type Peer struct {
	// Endpoint is where frames for the peer are sent. Received frames are
	// matched to a peer by the outer source address alone, since a Linux
	// vxlan device picks its UDP source port per flow (RFC 7348 §5, "Outer
	// UDP Header"), so no two peers may share an address.
	Endpoint netip.AddrPort
	// MAC is the peer's inner Ethernet address. Empty means the address
	// learned from the peer's frames, and broadcast until one arrives.
	MAC net.HardwareAddr
	// FollowPort sends to the source port of the peer's latest valid
	// frame instead of Endpoint's port: for a peer behind a NAT, whose
	// mapping gets a new port when the NAT rebinds it. It must stay off for
	// a kernel vxlan device, which sends from a port per flow. An address
	// change cannot be followed: VXLAN has no keys to prove the sender, and
	// peers are found by address, so the control plane moves the peer with
	// SetPeer.
	FollowPort bool
}

// settings is a validated Config with defaults applied.
type settings struct {
	port  uint16
	vni   uint32
	mac   mac
	peers []peerSettings
}

type peerSettings struct {
	endpoint   netip.AddrPort
	mac        mac
	staticMAC  bool
	followPort bool
}

func (c Config) validate() (settings, error) {
	s := settings{port: c.Port, vni: c.VNI}
	if s.port == 0 {
		s.port = DefaultPort
	}
	if s.vni == 0 {
		s.vni = DefaultVNI
	}
	if s.vni > maxVNI {
		return s, fmt.Errorf("vxlan: VNI %d: must be at most %d (24 bits, RFC 7348 §5)", c.VNI, maxVNI)
	}
	if len(c.MAC) == 0 {
		name := c.Name
		if name == "" {
			name = hostname()
		}
		s.mac = derivedMAC(name, s.vni, s.port)
	} else {
		m, err := parseMAC("MAC", c.MAC)
		if err != nil {
			return s, err
		}
		s.mac = m
	}
	byAddr := make(map[netip.Addr]int, len(c.Peers))
	for i, p := range c.Peers {
		ps, err := p.settings(i, s.port)
		if err != nil {
			return s, err
		}
		if j, dup := byAddr[ps.endpoint.Addr()]; dup {
			return s, sharedAddrError(i, p, j)
		}
		byAddr[ps.endpoint.Addr()] = i
		s.peers = append(s.peers, ps)
	}
	return s, nil
}

// settings checks p as peer i; an endpoint without a port gets port, the
// local one.
func (p Peer) settings(i int, port uint16) (peerSettings, error) {
	ep := netip.AddrPortFrom(p.Endpoint.Addr().Unmap(), p.Endpoint.Port())
	if !ep.Addr().IsValid() || ep.Addr().IsUnspecified() || ep.Addr().IsMulticast() {
		return peerSettings{}, fmt.Errorf("vxlan: Peers[%d].Endpoint %v: want a unicast address and port", i, p.Endpoint)
	}
	if ep.Port() == 0 {
		ep = netip.AddrPortFrom(ep.Addr(), port)
	}
	ps := peerSettings{endpoint: ep, followPort: p.FollowPort}
	if len(p.MAC) != 0 {
		m, err := parseMAC(fmt.Sprintf("Peers[%d].MAC", i), p.MAC)
		if err != nil {
			return peerSettings{}, err
		}
		ps.mac, ps.staticMAC = m, true
	}
	return ps, nil
}

func sharedAddrError(i int, p Peer, j int) error {
	return fmt.Errorf("vxlan: Peers[%d].Endpoint %v: address already used by Peers[%d]; peers are told apart by outer source address only", i, p.Endpoint, j)
}
