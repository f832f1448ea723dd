package ike

import (
	"fmt"
	"net/netip"
	"time"
)

// Defaults for the zero values of Config.
const (
	DefaultIKERekeyTime      = 4 * time.Hour
	DefaultChildRekeyTime    = time.Hour
	DefaultDPDInterval       = 30 * time.Second
	DefaultRetransmitTimeout = 500 * time.Millisecond
	DefaultRetransmitTries   = 6
	DefaultCookieThreshold   = 30 // strongSwan's charon.cookie_threshold
	DefaultHalfOpenLimit     = 1000
)

// minPSK is the shortest pre-shared key accepted: RFC 7296 §2.15 asks for
// keys with as much entropy as the PRF's key, which a short PSK never has.
const minPSK = 16

// Config configures an Engine.
type Config struct {
	// LocalID is how this gateway identifies itself: an FQDN
	// ("gw1.cluster-a.example"), an IP address, "user@host" or
	// "keyid:text" / "keyid:#hex", in strongSwan's notation.
	LocalID string
	// PSK is the pre-shared key, shared with every peer; at least 16 bytes.
	PSK []byte
	// IKEProposals and ESPProposals are the algorithms offered and
	// accepted, most preferred first, in strongSwan's notation, e.g.
	// "aes256gcm16-prfsha256-x25519" and "aes256gcm16". Empty means
	// DefaultIKEProposals and DefaultESPProposals.
	IKEProposals, ESPProposals []string
	// IKERekeyTime and ChildRekeyTime are how long an IKE SA and a CHILD_SA
	// live before this side rekeys them, less a random part of RekeyJitter
	// so that both sides do not rekey at once. Zero means the defaults.
	IKERekeyTime, ChildRekeyTime time.Duration
	// RekeyJitter is the most taken off each rekey time. Zero means a
	// tenth of it; it must be shorter than the rekey times.
	RekeyJitter time.Duration
	// ChildRekeyBytes rekeys a CHILD_SA once it has carried this many bytes
	// in and out together; zero means no byte limit. CHILD_SAs are
	// rekeyed before their sequence numbers run out in any case.
	ChildRekeyBytes uint64
	// DPDInterval is how long a peer may stay silent, in IKE and ESP,
	// before a liveness check (an empty INFORMATIONAL) is sent. Zero means
	// DefaultDPDInterval.
	DPDInterval time.Duration
	// RetransmitTimeout is how long the first copy of a request waits for
	// its answer; each retransmission waits twice as long as the one
	// before. RetransmitTries is how many copies are sent in all before the
	// peer is declared dead, its SAs removed and, for a peer this side
	// initiates to, a new IKE SA started. Zero means the defaults (500 ms,
	// as libreswan's retransmit-interval, and 6: dead after 31.5 s). The
	// first retransmission matters most: when a cluster's gateway fails
	// over, the new one's first IKE_SA_INIT often reaches a remote that
	// has not yet learned its address, and is dropped.
	RetransmitTimeout time.Duration
	RetransmitTries   int
	// CookieThreshold is the number of half-open IKE SAs (answered
	// IKE_SA_INIT, no IKE_AUTH yet) from which new IKE_SA_INIT requests
	// must return a cookie first, which a sender of spoofed addresses
	// never receives (RFC 7296 §2.6). Zero means DefaultCookieThreshold.
	CookieThreshold int
	// HalfOpenLimit is the most half-open IKE SAs kept; IKE_SA_INIT
	// requests beyond it are dropped even with a valid cookie. It must
	// exceed CookieThreshold. Zero means DefaultHalfOpenLimit. A half-open
	// SA expires when the peer's IKE_AUTH could no longer arrive: after
	// the sum of the retransmission timeouts (31.5 s by default).
	HalfOpenLimit int
	// Peers are the remote gateways at start; a peer's index here is its
	// number, ChildSA.Peer. There may be none: Engine.SetPeer and
	// RemovePeer change the set while the engine runs.
	Peers []PeerConfig
}

// PeerConfig is one remote gateway.
type PeerConfig struct {
	// Endpoint is the peer's address and IKE port (4500 when the port is
	// 0). IKE_SA_INIT requests are accepted from this address only.
	Endpoint netip.AddrPort
	// RemoteID is the identity the peer must prove, in LocalID's notation;
	// empty accepts any identity that authenticates with the PSK.
	RemoteID string
	// LocalTS and RemoteTS are the CIDRs behind this gateway and behind
	// the peer that the CHILD_SA carries.
	LocalTS, RemoteTS []netip.Prefix
	// Initiate makes this side set up the IKE SA and re-establish it after
	// a failure; otherwise it waits for the peer.
	Initiate bool
}

// settings is a validated Config with defaults applied.
type settings struct {
	localID           identity
	psk               []byte
	ike, esp          []offer
	ikeRekey          time.Duration
	childRekey        time.Duration
	jitter            time.Duration
	childBytes        uint64
	dpd               time.Duration
	retransmitTimeout time.Duration
	retransmitTries   int
	cookieThreshold   int
	halfOpenLimit     int
	peers             []peerSettings
}

type peerSettings struct {
	endpoint          netip.AddrPort
	remoteID          *identity
	localTS, remoteTS []netip.Prefix
	initiate          bool
}

// CheckPSK reports whether psk is long enough to be a pre-shared key, so
// that a key read from a file is judged as Validate judges Config.PSK.
func CheckPSK(psk []byte) error {
	if len(psk) < minPSK {
		return fmt.Errorf("%d bytes; use at least %d random bytes, the same on every gateway", len(psk), minPSK)
	}
	return nil
}

// Validate reports what is wrong with c, naming the field and the fix, as
// NewEngine would.
func (c Config) Validate() error {
	_, err := c.validate()
	return err
}

func (c Config) validate() (settings, error) {
	s := settings{
		psk:               clone(c.PSK),
		ikeRekey:          orDefault(c.IKERekeyTime, DefaultIKERekeyTime),
		childRekey:        orDefault(c.ChildRekeyTime, DefaultChildRekeyTime),
		jitter:            c.RekeyJitter,
		childBytes:        c.ChildRekeyBytes,
		dpd:               orDefault(c.DPDInterval, DefaultDPDInterval),
		retransmitTimeout: orDefault(c.RetransmitTimeout, DefaultRetransmitTimeout),
		retransmitTries:   orDefault(c.RetransmitTries, DefaultRetransmitTries),
		cookieThreshold:   orDefault(c.CookieThreshold, DefaultCookieThreshold),
		halfOpenLimit:     orDefault(c.HalfOpenLimit, DefaultHalfOpenLimit),
	}
	id, err := parseIdentity(c.LocalID)
	if err != nil {
		return s, fmt.Errorf("ike: LocalID: %w; set it to this gateway's FQDN or address", err)
	}
	s.localID = id
	if err := CheckPSK(c.PSK); err != nil {
		return s, fmt.Errorf("ike: PSK: %w", err)
	}
	if s.ike, err = offers("IKEProposals", c.IKEProposals, DefaultIKEProposals, protoIKE); err != nil {
		return s, err
	}
	if s.esp, err = offers("ESPProposals", c.ESPProposals, DefaultESPProposals, protoESP); err != nil {
		return s, err
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"IKERekeyTime", c.IKERekeyTime}, {"ChildRekeyTime", c.ChildRekeyTime}, {"RekeyJitter", c.RekeyJitter},
		{"DPDInterval", c.DPDInterval}, {"RetransmitTimeout", c.RetransmitTimeout},
	} {
		if d.v < 0 {
			return s, fmt.Errorf("ike: %s %v: negative; use a positive duration or 0 for the default", d.name, d.v)
		}
	}
	if s.jitter == 0 {
		s.jitter = min(s.ikeRekey, s.childRekey) / 10
	}
	if s.jitter >= min(s.ikeRekey, s.childRekey) {
		return s, fmt.Errorf("ike: RekeyJitter %v: not shorter than the rekey times; make it at most a fraction of IKERekeyTime and ChildRekeyTime", s.jitter)
	}
	if c.RetransmitTries < 0 || c.CookieThreshold < 0 || c.HalfOpenLimit < 0 {
		return s, fmt.Errorf("ike: RetransmitTries %d, CookieThreshold %d, HalfOpenLimit %d: negative; use a positive count or 0 for the default", c.RetransmitTries, c.CookieThreshold, c.HalfOpenLimit)
	}
	if s.halfOpenLimit <= s.cookieThreshold {
		return s, fmt.Errorf("ike: HalfOpenLimit %d: not above CookieThreshold %d, so cookies would never engage; raise HalfOpenLimit or lower CookieThreshold", s.halfOpenLimit, s.cookieThreshold)
	}
	seen := map[netip.Addr]int{}
	for i, p := range c.Peers {
		ps, err := p.validate(i)
		if err != nil {
			return s, err
		}
		if j, dup := seen[ps.endpoint.Addr()]; dup {
			return s, fmt.Errorf("ike: Peers[%d].Endpoint %v: address already used by Peers[%d]; peers are told apart by address", i, p.Endpoint, j)
		}
		seen[ps.endpoint.Addr()] = i
		s.peers = append(s.peers, ps)
	}
	return s, nil
}

func (p PeerConfig) validate(i int) (peerSettings, error) {
	ep := netip.AddrPortFrom(p.Endpoint.Addr().Unmap(), p.Endpoint.Port())
	if !ep.Addr().IsValid() || ep.Addr().IsUnspecified() || ep.Addr().IsMulticast() {
		return peerSettings{}, fmt.Errorf("ike: Peers[%d].Endpoint %v: want the peer's unicast address and port", i, p.Endpoint)
	}
	if ep.Port() == 0 {
		ep = netip.AddrPortFrom(ep.Addr(), 4500)
	}
	ps := peerSettings{endpoint: ep, initiate: p.Initiate}
	if p.RemoteID != "" {
		id, err := parseIdentity(p.RemoteID)
		if err != nil {
			return ps, fmt.Errorf("ike: Peers[%d].RemoteID: %w; set it to the peer's LocalID or leave it empty", i, err)
		}
		ps.remoteID = &id
	}
	for _, ts := range []struct {
		name string
		in   []netip.Prefix
		out  *[]netip.Prefix
	}{{"LocalTS", p.LocalTS, &ps.localTS}, {"RemoteTS", p.RemoteTS, &ps.remoteTS}} {
		if len(ts.in) == 0 {
			return ps, fmt.Errorf("ike: Peers[%d].%s: empty; list the cluster CIDRs the tunnel carries", i, ts.name)
		}
		for _, pf := range ts.in {
			if !pf.IsValid() {
				return ps, fmt.Errorf("ike: Peers[%d].%s: invalid prefix %v; write CIDRs such as 10.1.0.0/16", i, ts.name, pf)
			}
		}
		*ts.out = canonical(ts.in)
	}
	return ps, nil
}

func offers(field string, names, defaults []string, protocol uint8) ([]offer, error) {
	if len(names) == 0 {
		names = defaults
	}
	out := make([]offer, 0, len(names))
	for i, n := range names {
		o, err := parseOffer(n, protocol)
		if err != nil {
			return nil, fmt.Errorf("ike: %s[%d] %q: %w", field, i, n, err)
		}
		out = append(out, o)
	}
	return out, nil
}

func orDefault[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}
