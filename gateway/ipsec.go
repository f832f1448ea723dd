package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"regexp"
	"strings"
	"time"

	"github.com/snorkel-net/snorkel/transport"
	"github.com/snorkel-net/snorkel/transport/esp"
	"github.com/snorkel-net/snorkel/transport/esp/ike"
)

// ESPConfig is the local side of the esp transport: IPsec ESP in UDP, keyed
// by IKEv2 with the clusterset's pre-shared key.
type ESPConfig struct {
	// PSK is the pre-shared key every gateway of the clusterset shares
	// (broker-info's IPSecPSK), at least 16 bytes; PSKFile names a file that
	// holds it instead. Give exactly one.
	PSK     string `json:"psk,omitempty"`
	PSKFile string `json:"pskFile,omitempty"`
	// LocalID is this gateway's IKE identity; default the cluster ID, as
	// an FQDN identity.
	LocalID string `json:"localID,omitempty"`
	// Proposals are the ESP algorithms offered and accepted, most preferred
	// first, in strongSwan's notation ("aes256gcm16", "aes128gcm16",
	// "aes256-sha256", "aes128-sha256"); IKEProposals the IKE SA's
	// ("aes256gcm16-prfsha256-x25519"). Empty means the defaults.
	Proposals    []string `json:"proposals,omitempty"`
	IKEProposals []string `json:"ikeProposals,omitempty"`
	// RekeyTime and IKERekeyTime are how long a CHILD_SA and an IKE SA
	// live before they are rekeyed, as Go durations ("1h"); empty means
	// the defaults (1h and 4h).
	RekeyTime    string `json:"rekeyTime,omitempty"`
	IKERekeyTime string `json:"ikeRekeyTime,omitempty"`
	// RekeyBytes rekeys a CHILD_SA once it has carried this many bytes,
	// both directions together; 0 means no byte limit. A CHILD_SA is
	// rekeyed before its sequence numbers run out in any case.
	RekeyBytes uint64 `json:"rekeyBytes,omitempty"`
}

// ESPRemoteConfig is what the esp transport needs to know of a remote
// gateway beyond its endpoint.
type ESPRemoteConfig struct {
	// ID is the IKE identity the remote must prove; default its cluster
	// ID.
	ID string `json:"id,omitempty"`
	// Initiate says whether this gateway sets up the IKE SA with the remote
	// (true) or waits for it (false). Unset, the gateway of the cluster
	// whose ID sorts first initiates, so that two Snorkel gateways agree.
	Initiate *bool `json:"initiate,omitempty"`
}

// parseESP parses the esp section.
func (c *Config) parseESP(errs *errList) *ESPSpec {
	e := c.Transport.ESP
	if e == nil {
		return nil
	}
	es := &ESPSpec{PSK: []byte(e.PSK), PSKFile: e.PSKFile, LocalID: e.LocalID, Proposals: e.Proposals, IKEProposals: e.IKEProposals, RekeyBytes: e.RekeyBytes}
	for _, d := range []struct {
		field, v string
		to       *time.Duration
	}{{"rekeyTime", e.RekeyTime, &es.RekeyTime}, {"ikeRekeyTime", e.IKERekeyTime, &es.IKERekeyTime}} {
		if d.v == "" {
			continue
		}
		v, err := time.ParseDuration(d.v)
		if err != nil || v < 10*time.Second {
			errs.add("transport.esp."+d.field, "%q is not a duration of at least 10s; write it like 1h or 30m", d.v)
			continue
		}
		*d.to = v
	}
	return es
}

// checkESP checks the esp section and the remotes' esp settings; the
// engine's own validation (proposals, PSK length) runs on the result too,
// with its field names mapped to the config's.
func (s *Spec) checkESP(errs *errList, d *spec) {
	e := s.Transport.ESP
	if e == nil {
		errs.add("transport.esp", "is required for the esp transport; give psk or pskFile (the clusterset's pre-shared key)")
		return
	}
	switch {
	case len(e.PSK) > 0 && e.PSKFile != "":
		errs.add("transport.esp.psk", "psk and pskFile are both set; keep one")
	case len(e.PSK) == 0 && e.PSKFile == "":
		errs.add("transport.esp.psk", "is required: give the clusterset's pre-shared key (at least 16 bytes) in psk, or a file holding it in pskFile")
	}
	for _, t := range []struct {
		field string
		v     time.Duration
	}{{"rekeyTime", e.RekeyTime}, {"ikeRekeyTime", e.IKERekeyTime}} {
		if t.v != 0 && t.v < 10*time.Second {
			errs.add("transport.esp."+t.field, "%s is shorter than 10s; write it like 1h or 30m", t.v)
		}
	}
	if len(errs.errs) > 0 {
		return // the engine would repeat what is wrong with the remotes
	}
	psk := []byte("0123456789abcdef") // a pskFile's key is judged by readKeys
	if len(e.PSK) > 0 {
		psk = e.PSK
	}
	if err := d.ikeConfig(psk).Validate(); err != nil {
		errs.addErr(errors.New(ikeFieldNames(err)))
	}
}

// ikeFieldNames returns the IKE engine's error with its field names
// replaced by the config's.
func ikeFieldNames(err error) string {
	m := strings.TrimPrefix(err.Error(), "ike: ")
	m = peerField.ReplaceAllString(m, "remotes[$1]$2")
	return ikeFields.Replace(m)
}

var (
	peerField = regexp.MustCompile(`Peers\[(\d+)\](\.\w+)?`)
	ikeFields = strings.NewReplacer(
		"IKEProposals", "transport.esp.ikeProposals",
		"ESPProposals", "transport.esp.proposals",
		"LocalID", "transport.esp.localID",
		"PSK", "transport.esp.psk",
		".RemoteID", ".esp.id",
		".Endpoint", ".endpoint",
		".LocalTS", ".localTS",
		".RemoteTS", ".remoteTS",
	)
)

// ikeConfig is the IKE engine's configuration for spec s with key psk.
func (s *spec) ikeConfig(psk []byte) ike.Config {
	e := s.Transport.ESP
	cfg := ike.Config{
		LocalID:         e.LocalID,
		PSK:             psk,
		IKEProposals:    e.IKEProposals,
		ESPProposals:    e.Proposals,
		ChildRekeyBytes: e.RekeyBytes,
		ChildRekeyTime:  e.RekeyTime,
		IKERekeyTime:    e.IKERekeyTime,
	}
	if cfg.LocalID == "" {
		cfg.LocalID = s.Cluster.ID
	}
	for i := range s.Remotes {
		cfg.Peers = append(cfg.Peers, s.ikePeer(i))
	}
	return cfg
}

// ikePeer is the IKE engine's view of remote i.
func (s *spec) ikePeer(i int) ike.PeerConfig {
	local := s.local
	if s.globalnet != nil {
		local = []netip.Prefix{s.globalnet.rules.Global}
	}
	r := &s.Remotes[i]
	p := ike.PeerConfig{
		Endpoint: s.remotes[i].endpoint,
		RemoteID: r.ID,
		LocalTS:  local,
		RemoteTS: s.remotes[i].cidrs,
		Initiate: s.Cluster.ID < r.ID,
	}
	if r.ESP != nil {
		if r.ESP.ID != "" {
			p.RemoteID = r.ESP.ID
		}
		if r.ESP.Initiate != nil {
			p.Initiate = *r.ESP.Initiate
		}
	}
	return p
}

// ipsec is the esp transport together with the IKE engine that keys it.
type ipsec struct {
	*esp.Transport
	ike  *ike.Engine
	stop context.CancelFunc
	done chan struct{}
}

var _ transport.DropCounter = (*ipsec)(nil)

func newESP(s *spec, k keys, d transport.Deliverer, log *slog.Logger) (peerTransport, error) {
	cfg := s.ikeConfig(k.espPSK)
	ec := esp.Config{Port: s.port, KeepaliveInterval: s.Transport.Keepalive}
	for _, r := range s.remotes {
		ec.Peers = append(ec.Peers, esp.Peer{Endpoint: r.endpoint})
	}
	tr, err := esp.New(ec, d)
	if err != nil {
		return nil, err
	}
	eng, err := ike.NewEngine(cfg, tr, tr, log.With("component", "ike"))
	if err != nil {
		tr.Close()
		return nil, fmt.Errorf("transport.esp: %s", ikeFieldNames(err))
	}
	ctx, stop := context.WithCancel(context.Background())
	t := &ipsec{Transport: tr, ike: eng, stop: stop, done: make(chan struct{})}
	tr.SetIKEHandler(eng.Receive)
	tr.SetMoveHandler(eng.Follow)
	go func() {
		defer close(t.done)
		eng.Run(ctx)
	}()
	log.Info("esp transport up", "port", tr.Port(), "localID", cfg.LocalID)
	return t, nil
}

func (t *ipsec) setPeer(s *spec, i, slot int, _ keys) error {
	if err := t.Transport.SetPeer(slot, esp.Peer{Endpoint: s.remotes[i].endpoint}); err != nil {
		return err
	}
	if err := t.ike.SetPeer(slot, s.ikePeer(i)); err != nil {
		return fmt.Errorf("transport.esp: %s", ikeFieldNames(err))
	}
	return nil
}

// removePeer tells the remote and removes its SAs before the transport
// forgets it.
func (t *ipsec) removePeer(slot int) error {
	return errors.Join(t.ike.RemovePeer(slot), t.Transport.RemovePeer(slot))
}

// Close stops the IKE engine, which tells the peers and removes the
// CHILD_SAs, then the transport.
func (t *ipsec) Close() error {
	t.stop()
	<-t.done
	return t.Transport.Close()
}

// IPsecStatus is the IKE state with one remote.
type IPsecStatus struct {
	State       string     `json:"state"`
	IKESPIs     string     `json:"ikeSPIs,omitempty"` // initiator's_responder's, as swanctl shows them
	Established *time.Time `json:"established,omitempty"`
	Children    []ChildSA  `json:"childSAs,omitempty"`
	LastError   string     `json:"lastError,omitempty"`
}

// ChildSA is one CHILD_SA with a remote.
type ChildSA struct {
	InSPI     string    `json:"inSPI"`
	OutSPI    string    `json:"outSPI"`
	Algorithm string    `json:"algorithm"`
	LocalTS   []string  `json:"localTS"`
	RemoteTS  []string  `json:"remoteTS"`
	Installed time.Time `json:"installed"`
}

// ipsecStatus returns the IKE state by peer slot, or nil for other
// transports.
func (g *Gateway) ipsecStatus() map[int]IPsecStatus {
	t, ok := g.tr.(*ipsec)
	if !ok {
		return nil
	}
	out := map[int]IPsecStatus{}
	for slot, p := range t.ike.Status() {
		st := IPsecStatus{State: string(p.State), LastError: p.LastError}
		if p.IKESPIi != 0 {
			st.IKESPIs = fmt.Sprintf("%016x_i %016x_r", p.IKESPIi, p.IKESPIr)
		}
		if !p.Established.IsZero() {
			at := p.Established.UTC()
			st.Established = &at
		}
		for _, c := range p.Children {
			st.Children = append(st.Children, ChildSA{
				InSPI:     fmt.Sprintf("%08x", c.InSPI),
				OutSPI:    fmt.Sprintf("%08x", c.OutSPI),
				Algorithm: c.Transform.String(),
				LocalTS:   prefixStrings(c.LocalTS),
				RemoteTS:  prefixStrings(c.RemoteTS),
				Installed: c.Installed.UTC(),
			})
		}
		out[slot] = st
	}
	return out
}

func prefixStrings(ps []netip.Prefix) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.String()
	}
	return out
}
