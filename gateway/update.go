package gateway

import (
	"errors"
	"fmt"
	"reflect"
	"slices"

	"github.com/snorkel-net/snorkel/natengine"
)

// ErrLocalChange is returned by Update for a spec whose local part (the
// cluster's ID, the TUN device, the transport and its keys, Globalnet's
// global CIDR) differs from the running one: that needs a new gateway.
var ErrLocalChange = errors.New("gateway: the local configuration changed; start a new gateway")

// Update makes the gateway serve sp, which it validates, in place: see
// update. It does not touch the host's routes; Runner does.
func (g *Gateway) Update(sp *Spec) error {
	s, err := sp.derive()
	if err != nil {
		return err
	}
	return g.update(s)
}

// sameLocal reports whether a and b differ at most in their remotes, in
// this cluster's own pod and service CIDRs, in Globalnet's addresses
// (egress pools, ingress entries, cluster egress IPs) and in their
// clusterset IPs, which a running gateway takes in place.
func sameLocal(a, b *Spec) bool {
	ca, cb := *a, *b
	ca.Remotes, cb.Remotes = nil, nil
	ca.Cluster.PodCIDRs, cb.Cluster.PodCIDRs = nil, nil
	ca.Cluster.ServiceCIDRs, cb.Cluster.ServiceCIDRs = nil, nil
	ca.ClustersetIP, cb.ClustersetIP = nil, nil
	if (a.Globalnet == nil) != (b.Globalnet == nil) {
		return false
	}
	if a.Globalnet != nil {
		ga, gb := *a.Globalnet, *b.Globalnet
		ga.Rules = natengine.Rules{Global: ga.Rules.Global}
		gb.Rules = natengine.Rules{Global: gb.Rules.Global}
		ca.Globalnet, cb.Globalnet = &ga, &gb
	}
	return reflect.DeepEqual(ca, cb)
}

// remoteChanged reports whether remote i of a and remote j of b (the same
// cluster) differ in anything the transport or the routes carry.
func remoteChanged(a *spec, i int, b *spec, j int) bool {
	return !reflect.DeepEqual(a.Remotes[i], b.Remotes[j]) || !slices.Equal(a.remotes[i].cidrs, b.remotes[j].cidrs) ||
		a.health.remotes[i] != b.health.remotes[j]
}

// update makes the gateway serve next, a spec with the same local part
// (sameLocal). Each remote that joined, changed or left is given to the
// transport alone; the others' peers are not touched. The order keeps
// traffic flowing and closed: the remotes that left lose their routes
// before their transport peers, so that a new remote may take over a
// leaver's endpoint or slot, and a joining remote's peer exists before any
// route leads to it. The NAT engine swaps its rules and keeps every flow
// they still give.
//
// An error leaves the gateway in a state between the two specs, which the
// caller resolves by starting a new gateway.
func (g *Gateway) update(next *spec) error {
	prev := g.set.Load()
	if !sameLocal(prev.spec.Spec, next.Spec) {
		return ErrLocalChange
	}
	var errs errList
	k := next.readKeys(&errs, true)
	if err := errs.err(); err != nil {
		return err
	}

	staying := map[string]bool{}
	for _, r := range next.remotes {
		staying[r.id] = true
	}
	if left := slices.ContainsFunc(prev.spec.remotes, func(r remoteSpec) bool { return !staying[r.id] }); left {
		mid, err := prev.spec.without(staying)
		if err != nil {
			return err
		}
		ms := newRemoteSet(mid, prev)
		if err := g.setRules(mid, ms); err != nil {
			return err
		}
		g.set.Store(ms)
		// The leavers' connections to VIPs end before another remote
		// may take their slots.
		if err := g.setClusterset(mid, ms); err != nil {
			return err
		}
		var gone []error
		for slot, st := range prev.bySlot {
			if st != nil && !staying[st.id] {
				gone = append(gone, g.tr.removePeer(slot))
			}
		}
		if err := errors.Join(gone...); err != nil {
			return err
		}
		prev = ms
	}

	// This cluster's own ranges are the local traffic selectors of every
	// IPsec peer: when they change, each peer negotiates new CHILD_SAs
	// beside its old ones.
	localChanged := !slices.Equal(prev.spec.local, next.local)
	ns := newRemoteSet(next, prev)
	for i, slot := range ns.slots {
		pi := prev.index(slot)
		if pi >= 0 && !localChanged && !remoteChanged(prev.spec, pi, next, i) {
			continue
		}
		if pi >= 0 && prev.spec.Remotes[pi].Gateway != next.Remotes[i].Gateway {
			// Another gateway of that cluster: nothing of the old
			// peer's tunnel state holds.
			if err := g.tr.removePeer(slot); err != nil {
				return fmt.Errorf("remotes[%d] (cluster %q): its gateway changed from %q to %q: %w", i, next.remotes[i].id, prev.spec.Remotes[pi].Gateway, next.Remotes[i].Gateway, err)
			}
		}
		if err := g.tr.setPeer(next, i, slot, k); err != nil {
			return fmt.Errorf("remotes[%d] (cluster %q): %w", i, next.remotes[i].id, err)
		}
	}
	if err := g.setRules(next, ns); err != nil {
		return err
	}
	g.set.Store(ns)
	if err := g.setClusterset(next, ns); err != nil {
		return err
	}
	g.setPathMTU()
	return nil
}

// without is s with only the remotes in keep, and its VIPs backed by them
// and the local cluster only.
func (s *spec) without(keep map[string]bool) (*spec, error) {
	c := *s.Spec
	c.Remotes = slices.DeleteFunc(slices.Clone(c.Remotes), func(r RemoteSpec) bool { return !keep[r.ID] })
	if cs := c.ClustersetIP; cs != nil {
		kept := *cs
		kept.Services = make([]ClustersetService, len(cs.Services))
		for i, sv := range cs.Services {
			sv.Backends = slices.DeleteFunc(slices.Clone(sv.Backends), func(b ClustersetBackend) bool {
				return b.Cluster != c.Cluster.ID && !keep[b.Cluster]
			})
			kept.Services[i] = sv
		}
		c.ClustersetIP = &kept
	}
	return c.derive()
}

// setRules gives the NAT engine next's rules with the remotes by slot.
func (g *Gateway) setRules(next *spec, ns *remoteSet) error {
	gs := next.globalnet
	if gs == nil {
		return nil
	}
	gs.rules.Remotes = ns.natRemotes()
	if e, ok := g.xlate.(*natengine.Engine); ok {
		if err := e.SetRules(gs.rules); err != nil {
			return fmt.Errorf("globalnet: %w", err)
		}
	}
	g.globalnet.Store(gs)
	return nil
}
