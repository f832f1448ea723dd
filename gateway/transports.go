package gateway

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"syscall"

	"github.com/snorkel-net/snorkel/transport"
	"github.com/snorkel-net/snorkel/transport/vxlan"
	"github.com/snorkel-net/snorkel/transport/wireguard"
)

// newTransport opens the transport cfg names, delivering into d. It returns
// the local WireGuard public key, if any, so that it can be published.
func newTransport(s *spec, d transport.Deliverer, log *slog.Logger) (transport.Transport, string, error) {
	c := s.cfg
	var (
		tr  transport.Transport
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
	switch c.Transport.Type {
	case transport.WireGuard:
		tr, pub, err = newWireGuard(s, k, d, log)
	case transport.VXLAN:
		tr, err = newVXLAN(s, d)
	case transport.ESP:
		tr, err = newESP(s, k, d, log)
	default:
		return nil, "", fmt.Errorf("transport.type: unknown transport %q; use one of %s", c.Transport.Type, strings.Join(transport.Kinds, ", "))
	}
	if errors.Is(err, syscall.EADDRINUSE) {
		return nil, "", portError(s.port, err)
	}
	return tr, pub, err
}

func newWireGuard(s *spec, k keys, d transport.Deliverer, log *slog.Logger) (transport.Transport, string, error) {
	c := s.cfg
	pub := k.wgPrivate.Public()
	wc := wireguard.Config{
		PrivateKey: k.wgPrivate,
		Port:       s.port,
		MTU:        c.UnderlayMTU - wireguardOverhead(s),
		UAPIName:   c.Transport.WireGuard.UAPIName,
	}
	for i, r := range c.Remotes {
		f := fmt.Sprintf("remotes[%d].wireguard", i)
		pk, err := wireguard.ParseKey(r.WireGuard.PublicKey)
		if err != nil {
			return nil, "", fmt.Errorf("%s.publicKey: %w", f, err)
		}
		peer := wireguard.Peer{
			PublicKey:    pk,
			Endpoint:     s.remotes[i].endpoint,
			AllowedIPs:   s.allowedIPs(i),
			PresharedKey: k.wgPSK[i],
		}
		wc.Peers = append(wc.Peers, peer)
	}
	tr, err := wireguard.New(wc, d)
	if err != nil {
		return nil, "", err
	}
	log.Info("wireguard transport up", "publicKey", pub.String(), "port", s.port, "uapi", wc.UAPIName)
	return tr, pub.String(), nil
}

// wireguardOverhead is WireGuard's per-packet cost on this underlay.
func wireguardOverhead(s *spec) int {
	for _, r := range s.remotes {
		if r.endpoint.Addr().Is6() && !r.endpoint.Addr().Is4In6() {
			return 80
		}
	}
	return 60
}

func newVXLAN(s *spec, d transport.Deliverer) (transport.Transport, error) {
	c := s.cfg
	vc := vxlan.Config{Port: s.port, VNI: c.Transport.VXLAN.VNI, Name: "snorkel/" + c.Cluster.ID}
	if c.Transport.VXLAN.MAC != "" {
		vc.MAC, _ = net.ParseMAC(c.Transport.VXLAN.MAC) // checked by Validate
	}
	for i, r := range c.Remotes {
		p := vxlan.Peer{Endpoint: s.remotes[i].endpoint}
		if r.VXLAN != nil && r.VXLAN.MAC != "" {
			p.MAC, _ = net.ParseMAC(r.VXLAN.MAC)
		}
		vc.Peers = append(vc.Peers, p)
	}
	return vxlan.New(vc, d)
}

// endpointString formats a remote endpoint for labels and status.
func endpointString(ap netip.AddrPort) string {
	if !ap.IsValid() {
		return ""
	}
	return ap.String()
}
