package gateway

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"strings"
	"syscall"
	"time"

	"github.com/snorkel-net/snorkel/transport"
	"github.com/snorkel-net/snorkel/transport/vxlan"
	"github.com/snorkel-net/snorkel/transport/wireguard"
)

// peerTransport is a transport whose peers change while it runs: setPeer
// adds the remote at index i of s as peer slot, or changes that peer, and
// removePeer forgets slot. Neither touches another peer.
type peerTransport interface {
	transport.Transport
	setPeer(s *spec, i, slot int, k keys) error
	removePeer(slot int) error
}

// newTransport opens the transport s names, delivering into d, with the
// remotes of s as peers 0 to n-1. It returns the local WireGuard public
// key, if any, so that it can be published.
func newTransport(s *spec, d transport.Deliverer, log *slog.Logger) (peerTransport, string, error) {
	var (
		tr  peerTransport
		pub string
		err error
	)
	// The keys are read as Check reads them, so that what Check passes
	// opens.
	var errs errList
	k := s.readKeys(&errs, true)
	if err := errs.err(); err != nil {
		return nil, "", err
	}
	switch s.Transport.Kind {
	case transport.WireGuard:
		tr, pub, err = newWireGuard(s, k, d, log)
	case transport.VXLAN:
		tr, err = newVXLAN(s, d)
	case transport.ESP:
		tr, err = newESP(s, k, d, log)
	default:
		return nil, "", fmt.Errorf("transport.type: unknown transport %q; use one of %s", s.Transport.Kind, strings.Join(transport.Kinds, ", "))
	}
	if errors.Is(err, syscall.EADDRINUSE) {
		return nil, "", portError(s.port, err)
	}
	return tr, pub, err
}

// wgTransport is the wireguard transport with its peers kept by slot.
type wgTransport struct{ *wireguard.Transport }

func newWireGuard(s *spec, k keys, d transport.Deliverer, log *slog.Logger) (peerTransport, string, error) {
	pub := k.wgPrivate.Public()
	wc := wireguard.Config{
		PrivateKey: k.wgPrivate,
		Port:       s.port,
		MTU:        s.UnderlayMTU - wireguardOverhead(s),
		UAPIName:   s.Transport.WireGuard.UAPIName,
	}
	for i := range s.Remotes {
		wc.Peers = append(wc.Peers, s.wgPeer(i, k))
	}
	tr, err := wireguard.New(wc, d)
	if err != nil {
		return nil, "", err
	}
	log.Info("wireguard transport up", "publicKey", pub.String(), "port", s.port, "uapi", wc.UAPIName)
	return wgTransport{tr}, pub.String(), nil
}

// wgPeer is remote i as a WireGuard peer.
func (s *spec) wgPeer(i int, k keys) wireguard.Peer {
	p := wireguard.Peer{
		PublicKey:    s.Remotes[i].WireGuard.PublicKey,
		Endpoint:     s.remotes[i].endpoint,
		AllowedIPs:   s.allowedIPs(i),
		PresharedKey: k.wgPSK[i],
	}
	if s.Remotes[i].NAT {
		p.PersistentKeepalive = int(s.Transport.Keepalive / time.Second)
	}
	return p
}

func (t wgTransport) setPeer(s *spec, i, slot int, k keys) error {
	return t.SetPeer(slot, s.wgPeer(i, k))
}

func (t wgTransport) removePeer(slot int) error { return t.RemovePeer(slot) }

// wireguardOverhead is WireGuard's per-packet cost on this underlay.
func wireguardOverhead(s *spec) int {
	for _, r := range s.remotes {
		if r.endpoint.Addr().Is6() && !r.endpoint.Addr().Is4In6() {
			return 80
		}
	}
	return 60
}

// vxlanTransport is the vxlan transport with its peers kept by slot.
type vxlanTransport struct{ *vxlan.Transport }

func newVXLAN(s *spec, d transport.Deliverer) (peerTransport, error) {
	v := s.Transport.VXLAN
	vc := vxlan.Config{Port: s.port, VNI: v.VNI, MAC: v.MAC, Name: "snorkel/" + s.Cluster.ID}
	for i := range s.Remotes {
		vc.Peers = append(vc.Peers, s.vxlanPeer(i))
	}
	tr, err := vxlan.New(vc, d)
	if err != nil {
		return nil, err
	}
	return vxlanTransport{tr}, nil
}

// vxlanPeer is remote i as a VXLAN peer.
func (s *spec) vxlanPeer(i int) vxlan.Peer {
	p := vxlan.Peer{Endpoint: s.remotes[i].endpoint, FollowPort: s.Remotes[i].NAT}
	if r := s.Remotes[i].VXLAN; r != nil {
		p.MAC = r.MAC
	}
	return p
}

func (t vxlanTransport) setPeer(s *spec, i, slot int, _ keys) error {
	return t.SetPeer(slot, s.vxlanPeer(i))
}

func (t vxlanTransport) removePeer(slot int) error { return t.RemovePeer(slot) }

// endpointString formats a remote endpoint for labels and status.
func endpointString(ap netip.AddrPort) string {
	if !ap.IsValid() {
		return ""
	}
	return ap.String()
}
