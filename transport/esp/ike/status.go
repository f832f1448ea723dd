package ike

import (
	"net/netip"
	"slices"
	"time"
)

// State is where the connection with a peer stands.
type State string

const (
	StateDown        State = "down"        // no IKE SA, none being set up
	StateConnecting  State = "connecting"  // an IKE SA is being set up
	StateEstablished State = "established" // an authenticated IKE SA is in use
)

// PeerStatus is the state of one peer, for the gateway's status page.
type PeerStatus struct {
	Endpoint netip.AddrPort
	State    State
	// IKESPIi and IKESPIr name the IKE SA in use; zero without one.
	IKESPIi, IKESPIr uint64
	// Established is when the IKE SA in use, or the one it was rekeyed
	// from, was authenticated; zero without one.
	Established time.Time
	Children    []ChildStatus
	// LastError says what went wrong last, naming the peer and what to
	// check; it is cleared when an IKE SA is established.
	LastError string
}

// ChildStatus is one CHILD_SA of a peer.
type ChildStatus struct {
	InSPI, OutSPI     uint32
	Transform         Transform
	LocalTS, RemoteTS []netip.Prefix
	Installed         time.Time
}

// Status returns the state of each peer, indexed by peer number; a number
// without a peer, removed or never set, has the zero PeerStatus.
func (e *Engine) Status() []PeerStatus {
	e.statusMu.Lock()
	defer e.statusMu.Unlock()
	return slices.Clone(e.status)
}

// publish snapshots the state for Status.
func (e *Engine) publish() {
	st := make([]PeerStatus, len(e.peers))
	for i, p := range e.peers {
		if p == nil {
			continue
		}
		s := PeerStatus{Endpoint: p.cfg.endpoint, State: StateDown, LastError: p.lastErr}
		if e.connecting(p) {
			s.State = StateConnecting
		}
		if sa := p.ike; sa != nil {
			s.State, s.IKESPIi, s.IKESPIr, s.Established = StateEstablished, sa.spiI, sa.spiR, sa.established
		}
		for _, sa := range e.sas {
			if sa.p != p {
				continue
			}
			for _, c := range sa.children {
				s.Children = append(s.Children, ChildStatus{
					InSPI: c.InSPI, OutSPI: c.OutSPI, Transform: c.Transform,
					LocalTS: c.LocalTS, RemoteTS: c.RemoteTS, Installed: c.installed,
				})
			}
		}
		slices.SortFunc(s.Children, func(a, b ChildStatus) int { return a.Installed.Compare(b.Installed) })
		st[i] = s
	}
	e.statusMu.Lock()
	e.status = st
	e.statusMu.Unlock()
}
