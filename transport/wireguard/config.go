package wireguard

import (
	"fmt"
	"log/slog"
	"net/netip"
	"strconv"
	"strings"

	"golang.zx2c4.com/wireguard/device"
)

// DefaultMTU is the inner MTU used when Config.MTU is zero: a 1500-byte
// underlay less the IPv6 overhead, as wg-quick chooses.
const DefaultMTU = device.DefaultMTU

// minMTU is the smallest inner MTU every IPv4 host must accept (RFC 791).
const minMTU = 576

// maxMTU leaves room for the WireGuard header in the device's 64 KiB buffers.
const maxMTU = device.MaxContentSize

// Config configures a Transport.
type Config struct {
	// PrivateKey is this gateway's private key.
	PrivateKey Key
	// Port is the UDP listen port; 0 picks a free one (see Transport.Port).
	Port uint16
	// MTU is the inner MTU: the largest packet Send is given. 0 means DefaultMTU.
	MTU int
	// UAPIName, if set, serves wireguard-go's configuration protocol on
	// /var/run/wireguard/UAPIName.sock so that `wg show UAPIName` works.
	UAPIName string
	// Peers are the remote gateways; a peer's index is its position here.
	Peers []Peer
	// Logger receives the device's errors (rate-limited) and, at debug
	// level, its other messages. nil means slog.Default().
	Logger *slog.Logger
}

// Peer is one remote gateway.
type Peer struct {
	PublicKey    Key
	PresharedKey *Key
	// Endpoint is where to send to the peer. The zero value leaves it unset:
	// the device then learns it from the peer's first authenticated packet,
	// so only the other side can initiate.
	Endpoint netip.AddrPort
	// AllowedIPs are the remote cluster's CIDRs: packets to them go to this
	// peer, and packets from this peer must come from them.
	AllowedIPs []netip.Prefix
	// PersistentKeepalive is the keepalive interval in seconds; 0 is off.
	PersistentKeepalive int
}

// validate refuses a configuration that wireguard-go would take but that
// would not do what the caller meant.
func (c *Config) validate() error {
	if c.PrivateKey.IsZero() {
		return fmt.Errorf("wireguard: config: PrivateKey is not set; generate one with GenerateKey or LoadOrCreateKey")
	}
	if c.MTU != 0 && (c.MTU < minMTU || c.MTU > maxMTU) {
		return fmt.Errorf("wireguard: config: MTU %d is outside [%d, %d]; use 0 for the default %d", c.MTU, minMTU, maxMTU, DefaultMTU)
	}
	if strings.ContainsAny(c.UAPIName, "/\x00") {
		return fmt.Errorf("wireguard: config: UAPIName %q must be a plain interface name", c.UAPIName)
	}
	set := newPeerSet(c.PrivateKey.Public())
	for i := range c.Peers {
		if err := set.add(i, &c.Peers[i]); err != nil {
			return fmt.Errorf("wireguard: config: %w", err)
		}
	}
	return nil
}

// peerSet checks peers one at a time, each against those added before it,
// for what wireguard-go would take but would not do what the caller meant
// (a peer key equal to our own is ignored by the device, a prefix given to
// two peers silently moves to the last one).
type peerSet struct {
	self     Key
	keys     map[Key]int
	prefixes map[netip.Prefix]int
}

func newPeerSet(self Key) *peerSet {
	return &peerSet{self: self, keys: map[Key]int{}, prefixes: map[netip.Prefix]int{}}
}

// add checks p as peer number i and, if it is valid, adds it.
func (s *peerSet) add(i int, p *Peer) error {
	if p.PublicKey.IsZero() {
		return fmt.Errorf("Peers[%d].PublicKey is not set", i)
	}
	if p.PublicKey == s.self {
		return fmt.Errorf("Peers[%d].PublicKey is this gateway's own public key", i)
	}
	if j, dup := s.keys[p.PublicKey]; dup {
		return fmt.Errorf("Peers[%d].PublicKey is the same as Peers[%d]'s; give each remote gateway once", i, j)
	}
	if p.Endpoint.IsValid() && (p.Endpoint.Port() == 0 || p.Endpoint.Addr().IsUnspecified()) {
		return fmt.Errorf("Peers[%d].Endpoint %v needs an address and a port", i, p.Endpoint)
	}
	if p.PersistentKeepalive < 0 || p.PersistentKeepalive > 65535 {
		return fmt.Errorf("Peers[%d].PersistentKeepalive %d is outside [0, 65535] seconds", i, p.PersistentKeepalive)
	}
	for _, pfx := range p.AllowedIPs {
		if !pfx.IsValid() {
			return fmt.Errorf("Peers[%d].AllowedIPs has an invalid prefix", i)
		}
		m := pfx.Masked()
		if j, dup := s.prefixes[m]; dup && j != i {
			return fmt.Errorf("Peers[%d].AllowedIPs %v is also in Peers[%d].AllowedIPs; a CIDR belongs to one remote cluster", i, m, j)
		}
	}
	s.keys[p.PublicKey] = i
	for _, pfx := range p.AllowedIPs {
		s.prefixes[pfx.Masked()] = i
	}
	return nil
}

// deviceUAPI renders the device section of a UAPI set operation
// (https://www.wireguard.com/xplatform/#configuration-protocol).
func (c *Config) deviceUAPI() string {
	var b strings.Builder
	b.WriteString("private_key=" + c.PrivateKey.hex() + "\n")
	b.WriteString("listen_port=" + strconv.Itoa(int(c.Port)) + "\n")
	b.WriteString("replace_peers=true\n")
	for i := range c.Peers {
		writePeerUAPI(&b, &c.Peers[i])
	}
	return b.String()
}

// writePeerUAPI renders the section of a UAPI set operation that creates p
// or, if the device has a peer with p's key, updates it in place, which
// keeps its session: every field is written, so that one SetPeer leaves
// nothing of the peer's previous configuration but its endpoint.
func writePeerUAPI(b *strings.Builder, p *Peer) {
	b.WriteString("public_key=" + p.PublicKey.hex() + "\n")
	// An all-zero preshared key is WireGuard's "none" (§5.2).
	var psk Key
	if p.PresharedKey != nil {
		psk = *p.PresharedKey
	}
	b.WriteString("preshared_key=" + psk.hex() + "\n")
	if p.Endpoint.IsValid() {
		// Unmapped, so that an IPv4-mapped address goes out of the IPv4
		// socket rather than the IPv6-only one.
		ep := netip.AddrPortFrom(p.Endpoint.Addr().Unmap(), p.Endpoint.Port())
		b.WriteString("endpoint=" + ep.String() + "\n")
	}
	b.WriteString("persistent_keepalive_interval=" + strconv.Itoa(p.PersistentKeepalive) + "\n")
	b.WriteString("replace_allowed_ips=true\n")
	for _, pfx := range p.AllowedIPs {
		b.WriteString("allowed_ip=" + pfx.Masked().String() + "\n")
	}
}
