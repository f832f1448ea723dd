package gateway

import (
	"net/netip"
	"slices"
)

// remoteSet is the gateway's remotes, and this cluster's own ranges, as one
// immutable value swapped whole when they change (update.go), so that the
// data path reads it with one atomic load and no lock.
//
// Each remote has a slot: its peer number in the transport, its value in
// the route table and its index in the NAT engine's Rules.Remotes. A remote
// keeps its slot for as long as it stays configured, whatever else changes,
// so that its sessions, counters and flows carry over; a slot freed by a
// remote that left goes to the next one that joins.
type remoteSet struct {
	spec   *spec
	slots  []int          // spec.remotes index → slot
	bySlot []*remoteState // slot → state; nil where free
	routes *routeTable    // destination → slot
	local  *routeTable    // this cluster's own CIDRs (and TUN address) → 0
	health *health        // nil when there is nothing to probe or answer
}

// remoteState is what the gateway keeps of one remote across changes.
type remoteState struct {
	id string
	c  *counters
	// checkedSegments: the remote checks the TCP checksums of the
	// segments it sends (RemoteSpec.CheckedSegments).
	checkedSegments bool
}

// newRemoteSet lays out s's remotes in slots, keeping the slot, counters
// and probe state of every remote prev already has. prev may be nil.
func newRemoteSet(s *spec, prev *remoteSet) *remoteSet {
	rs := &remoteSet{spec: s, slots: make([]int, len(s.remotes))}
	old := map[string]int{}
	if prev != nil {
		for slot, st := range prev.bySlot {
			if st != nil {
				old[st.id] = slot
			}
		}
	}
	taken := map[int]bool{}
	for i, r := range s.remotes {
		if slot, ok := old[r.id]; ok {
			rs.slots[i] = slot
			taken[slot] = true
		} else {
			rs.slots[i] = -1
		}
	}
	next := 0
	for i := range rs.slots {
		if rs.slots[i] >= 0 {
			continue
		}
		for taken[next] {
			next++
		}
		rs.slots[i] = next
		taken[next] = true
	}
	n := 0
	for _, slot := range rs.slots {
		n = max(n, slot+1)
	}
	rs.bySlot = make([]*remoteState, n)
	var routes []route
	for i, r := range s.remotes {
		slot := rs.slots[i]
		st := &remoteState{id: r.id, c: &counters{}, checkedSegments: s.Remotes[i].CheckedSegments}
		if prev != nil {
			if ps := prev.state(old[r.id]); ps != nil && ps.id == r.id {
				st.c = ps.c
			}
		}
		rs.bySlot[slot] = st
		for _, p := range r.cidrs {
			routes = append(routes, route{p, slot})
		}
	}
	rs.routes = newRouteTable(routes)
	var local []route
	for _, p := range s.local {
		local = append(local, route{p, 0})
	}
	if a := s.tunAddr; a.IsValid() {
		local = append(local, route{netip.PrefixFrom(a.Addr(), a.Addr().BitLen()), 0})
	}
	rs.local = newRouteTable(local)
	var prevHealth *health
	if prev != nil {
		prevHealth = prev.health
	}
	rs.health = newHealth(s, rs.slots, len(rs.bySlot), prevHealth)
	return rs
}

// state is slot's remote, or nil.
func (rs *remoteSet) state(slot int) *remoteState {
	if slot < 0 || slot >= len(rs.bySlot) {
		return nil
	}
	return rs.bySlot[slot]
}

// index is the spec.remotes index of slot's remote, or -1.
func (rs *remoteSet) index(slot int) int {
	return slices.Index(rs.slots, slot)
}

// natRemotes are the remotes' global CIDRs by slot, as the NAT engine's
// Rules.Remotes takes them; a free slot has none.
func (rs *remoteSet) natRemotes() []netip.Prefix {
	out := make([]netip.Prefix, len(rs.bySlot))
	for i, r := range rs.spec.remotes {
		if len(r.cidrs) == 1 {
			out[rs.slots[i]] = r.cidrs[0]
		}
	}
	return out
}
