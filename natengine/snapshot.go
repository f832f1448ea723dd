package natengine

import (
	"encoding/binary"
	"fmt"
	"net/netip"
)

// ClusterEgressRule is the rule name Flows reports for flows that took an
// address of Rules.ClusterEgress.
const ClusterEgressRule = "cluster-egress"

// Addresses Globalnet never uses: Calico routes pods through 169.254.0.0/16,
// and link-local addresses do not cross routers (RFC 3927, RFC 4291).
var (
	linkLocal4 = netip.MustParsePrefix("169.254.0.0/16")
	linkLocal6 = netip.MustParsePrefix("fe80::/10")
)

// cidr is a prefix laid out like packet.Parsed's addresses (IPv4 in the first
// 4 bytes), for a containment test of two masked compares.
type cidr struct {
	hi, lo, mhi, mlo uint64
}

func newCIDR(p netip.Prefix) cidr {
	p = p.Masked()
	a := addr16(p.Addr())
	var m [16]byte
	for i := 0; i < p.Bits(); i++ {
		m[i/8] |= 0x80 >> (i % 8)
	}
	return cidr{
		hi: binary.LittleEndian.Uint64(a[:8]), lo: binary.LittleEndian.Uint64(a[8:]),
		mhi: binary.LittleEndian.Uint64(m[:8]), mlo: binary.LittleEndian.Uint64(m[8:]),
	}
}

// noAddress is a cidr that contains no address: no masked address has a bit
// outside the mask.
var noAddress = cidr{hi: 1}

// contains masks a bytewise, so any byte order does; little-endian loads
// are plain loads on the machines the gateway runs on.
func (c *cidr) contains(a *[16]byte) bool {
	return binary.LittleEndian.Uint64(a[:8])&c.mhi == c.hi && binary.LittleEndian.Uint64(a[8:])&c.mlo == c.lo
}

// addr16 lays a out as packet.Parsed does.
func addr16(a netip.Addr) [16]byte {
	if a.Is4() {
		v := a.As4()
		return [16]byte{v[0], v[1], v[2], v[3]}
	}
	return a.As16()
}

// memberIndex finds the first pool, in Rules order, whose members contain
// an address: host prefixes by map, wider ones by scan.
type memberIndex struct {
	hosts map[[16]byte]int
	nets  []memberNet
}

type memberNet struct {
	c    cidr
	pool int
}

func (m *memberIndex) add(p netip.Prefix, pool int) {
	if p.IsSingleIP() {
		if _, dup := m.hosts[addr16(p.Addr())]; !dup {
			m.hosts[addr16(p.Addr())] = pool
		}
		return
	}
	m.nets = append(m.nets, memberNet{newCIDR(p), pool})
}

func (m *memberIndex) find(a *[16]byte) int {
	best, ok := m.hosts[*a]
	if !ok {
		best = -1
	}
	for i := range m.nets {
		n := &m.nets[i]
		if (best < 0 || n.pool < best) && n.c.contains(a) {
			best = n.pool
		}
	}
	return best
}

type ingressRule struct {
	name          string
	kind          IngressKind
	global, local [16]byte
}

// snapshot is Rules compiled for the data path. It is immutable.
type snapshot struct {
	v6      bool
	global  cidr
	remotes []cidr // noAddress for a remote without Globalnet
	local   []cidr // those of Rules.Local in the family of Global
	podSel  memberIndex
	ns      memberIndex
	cluster [][16]byte
	poolIPs [][][16]byte
	ingress []ingressRule
	byGlob  map[[16]byte]int // ingress rule by global IP
	ownIP   map[[16]byte]int // ingress rule of a headless pod by pod IP
	svcIP   map[[16]byte]int // first ingress rule of a service by ClusterIP
	owner   map[[16]byte]string
}

func (s *snapshot) isLocal(a *[16]byte) bool {
	for i := range s.local {
		if s.local[i].contains(a) {
			return true
		}
	}
	return false
}

func (s *snapshot) isRemote(a *[16]byte) bool {
	for i := range s.remotes {
		if s.remotes[i].contains(a) {
			return true
		}
	}
	return false
}

// egressAddr returns the global address that a flow started by local
// address a takes (Submariner's precedence: pod-selector pool, namespace
// pool, a headless pod's own global IP, the cluster pool), or false when no
// rule gives one.
func (s *snapshot) egressAddr(a *[16]byte) ([16]byte, bool) {
	if i := s.podSel.find(a); i >= 0 {
		return pick(s.poolIPs[i], a), true
	}
	if i := s.ns.find(a); i >= 0 {
		return pick(s.poolIPs[i], a), true
	}
	if i, ok := s.ownIP[*a]; ok {
		return s.ingress[i].global, true
	}
	if len(s.cluster) > 0 {
		return pick(s.cluster, a), true
	}
	return [16]byte{}, false
}

// egressAllowed reports whether global address g is one the rules give to
// local address a, whichever of its pool's addresses the hash picked.
func (s *snapshot) egressAllowed(a, g *[16]byte) bool {
	in := func(ips [][16]byte) bool {
		for i := range ips {
			if ips[i] == *g {
				return true
			}
		}
		return false
	}
	if i := s.podSel.find(a); i >= 0 {
		return in(s.poolIPs[i])
	}
	if i := s.ns.find(a); i >= 0 {
		return in(s.poolIPs[i])
	}
	if i, ok := s.ownIP[*a]; ok {
		return s.ingress[i].global == *g
	}
	return in(s.cluster)
}

// pick chooses an address for local address a by a stable hash (FNV-1a),
// so a pod keeps its egress IP while the pool stays the same, across flows
// and restarts, as remote firewalls expect.
func pick(ips [][16]byte, a *[16]byte) [16]byte {
	h := uint32(2166136261)
	for _, c := range a {
		h ^= uint32(c)
		h *= 16777619
	}
	return ips[h%uint32(len(ips))]
}

// compile validates r and builds its snapshot. Errors name the field and
// the fix.
func compile(r Rules) (*snapshot, error) {
	g := r.Global
	if !g.IsValid() {
		return nil, fmt.Errorf("natengine: Rules.Global is not set; give this cluster's global CIDR, like 242.1.0.0/16")
	}
	if g.Addr().Is4In6() {
		return nil, fmt.Errorf("natengine: Rules.Global %s is an IPv4-mapped IPv6 prefix; write it in IPv4 form", g)
	}
	g = g.Masked()
	v6 := g.Addr().Is6()
	if bad := linkLocalOf(v6); g.Overlaps(bad) {
		return nil, fmt.Errorf("natengine: Rules.Global %s overlaps %s, which Globalnet never uses; choose another range", g, bad)
	}
	s := &snapshot{
		v6:     v6,
		global: newCIDR(g),
		podSel: memberIndex{hosts: map[[16]byte]int{}},
		ns:     memberIndex{hosts: map[[16]byte]int{}},
		byGlob: map[[16]byte]int{},
		ownIP:  map[[16]byte]int{},
		svcIP:  map[[16]byte]int{},
		owner:  map[[16]byte]string{},
	}
	sameFamily := func(p netip.Prefix) bool { return p.Addr().Is6() == v6 && !p.Addr().Is4In6() }

	for i, l := range r.Local {
		f := fmt.Sprintf("Rules.Local[%d]", i)
		switch {
		case !l.IsValid():
			return nil, fmt.Errorf("natengine: %s is not a valid prefix; give a pod or service CIDR", f)
		case l.Overlaps(linkLocal4) || l.Overlaps(linkLocal6):
			return nil, fmt.Errorf("natengine: %s %s overlaps a link-local range, which Globalnet never translates; remove it", f, l)
		case l.Overlaps(g):
			return nil, fmt.Errorf("natengine: %s %s overlaps Rules.Global %s; the global CIDR must lie outside the cluster's own CIDRs", f, l, g)
		}
		if sameFamily(l) {
			s.local = append(s.local, newCIDR(l))
		}
	}
	localHas := func(a netip.Addr) bool {
		for _, l := range r.Local {
			if l.Contains(a) {
				return true
			}
		}
		return false
	}

	s.remotes = make([]cidr, len(r.Remotes))
	for i, p := range r.Remotes {
		f := fmt.Sprintf("Rules.Remotes[%d]", i)
		s.remotes[i] = noAddress
		if !p.IsValid() {
			continue // a remote without Globalnet: its traffic passes as it is
		}
		switch {
		case !sameFamily(p):
			return nil, fmt.Errorf("natengine: %s %s is not in the family of Rules.Global %s; Globalnet does not translate between IPv4 and IPv6", f, p, g)
		case p.Overlaps(g):
			return nil, fmt.Errorf("natengine: %s %s overlaps Rules.Global %s; every cluster needs its own global CIDR", f, p, g)
		case p.Overlaps(linkLocalOf(v6)):
			return nil, fmt.Errorf("natengine: %s %s overlaps %s, which Globalnet never uses; choose another range", f, p, linkLocalOf(v6))
		}
		for _, l := range r.Local {
			if p.Overlaps(l) {
				return nil, fmt.Errorf("natengine: %s %s overlaps Rules.Local prefix %s; a remote's global CIDR must lie outside this cluster's CIDRs", f, p, l)
			}
		}
		for j, q := range r.Remotes[:i] {
			if q.IsValid() && p.Overlaps(q) {
				return nil, fmt.Errorf("natengine: %s %s overlaps Rules.Remotes[%d] %s; every cluster needs its own global CIDR", f, p, j, q)
			}
		}
		s.remotes[i] = newCIDR(p)
	}

	taken := map[netip.Addr]string{}
	globalIP := func(f string, a netip.Addr) error {
		switch {
		case !a.IsValid() || a.Is4In6():
			return fmt.Errorf("natengine: %s is not a valid address; give an address inside Rules.Global %s", f, g)
		case !g.Contains(a):
			return fmt.Errorf("natengine: %s %s is outside Rules.Global %s; take global IPs from the cluster's global CIDR", f, a, g)
		}
		if prev, dup := taken[a]; dup {
			return fmt.Errorf("natengine: %s %s is also %s; every global IP serves one purpose", f, a, prev)
		}
		taken[a] = f
		return nil
	}

	for i, a := range r.ClusterEgress {
		if err := globalIP(fmt.Sprintf("Rules.ClusterEgress[%d]", i), a); err != nil {
			return nil, err
		}
		s.cluster = append(s.cluster, addr16(a))
		s.owner[addr16(a)] = ClusterEgressRule
	}

	names := map[string]string{}
	name := func(f, n string) error {
		if n == "" {
			return fmt.Errorf("natengine: %s.Name is empty; name it after its object", f)
		}
		if prev, dup := names[n]; dup {
			return fmt.Errorf("natengine: %s.Name %q is also the name of %s; names must be unique", f, n, prev)
		}
		names[n] = f
		return nil
	}
	s.poolIPs = make([][][16]byte, len(r.Pools))
	for i, p := range r.Pools {
		f := fmt.Sprintf("Rules.Pools[%d]", i)
		if err := name(f, p.Name); err != nil {
			return nil, err
		}
		idx := &s.ns
		switch p.Kind {
		case PoolNamespace:
		case PoolPodSelector:
			idx = &s.podSel
		default:
			return nil, fmt.Errorf("natengine: %s.Kind %d is not a pool kind; use PoolNamespace or PoolPodSelector", f, p.Kind)
		}
		if len(p.IPs) == 0 {
			return nil, fmt.Errorf("natengine: %s (%q) has no IPs; give it at least one global IP", f, p.Name)
		}
		for j, a := range p.IPs {
			if err := globalIP(fmt.Sprintf("%s.IPs[%d]", f, j), a); err != nil {
				return nil, err
			}
			s.poolIPs[i] = append(s.poolIPs[i], addr16(a))
			s.owner[addr16(a)] = p.Name
		}
		for j, m := range p.Members {
			mf := fmt.Sprintf("%s.Members[%d]", f, j)
			switch {
			case !m.IsValid() || !sameFamily(m):
				return nil, fmt.Errorf("natengine: %s %s is not a prefix in the family of Rules.Global; give the pods' addresses", mf, m)
			case !localHas(m.Masked().Addr()):
				return nil, fmt.Errorf("natengine: %s %s is not inside Rules.Local; a pool's members are this cluster's pods", mf, m)
			}
			for k, q := range r.Pools[:i] {
				if q.Kind != p.Kind {
					continue // a pod-selector pool overrides a namespace pool: that overlap is the point
				}
				for _, qm := range q.Members {
					if qm.Overlaps(m) {
						return nil, fmt.Errorf("natengine: %s %s overlaps a member of Rules.Pools[%d] (%q) of the same kind; a pod belongs to one pool of each kind", mf, m, k, q.Name)
					}
				}
			}
			idx.add(m, i)
		}
	}

	for i, in := range r.Ingress {
		f := fmt.Sprintf("Rules.Ingress[%d]", i)
		if err := name(f, in.Name); err != nil {
			return nil, err
		}
		if in.Kind != IngressService && in.Kind != IngressHeadlessPod {
			return nil, fmt.Errorf("natengine: %s.Kind %d is not an ingress kind; use IngressService or IngressHeadlessPod", f, in.Kind)
		}
		if err := globalIP(f+".Global", in.Global); err != nil {
			return nil, err
		}
		switch {
		case !in.Local.IsValid() || in.Local.Is6() != v6 || in.Local.Is4In6():
			return nil, fmt.Errorf("natengine: %s.Local %s is not an address in the family of Rules.Global; give the ClusterIP or pod IP", f, in.Local)
		case !localHas(in.Local):
			return nil, fmt.Errorf("natengine: %s.Local %s is not inside Rules.Local; it must be this cluster's ClusterIP or pod IP", f, in.Local)
		}
		rule := ingressRule{name: in.Name, kind: in.Kind, global: addr16(in.Global), local: addr16(in.Local)}
		if in.Kind == IngressHeadlessPod {
			if j, dup := s.ownIP[rule.local]; dup {
				return nil, fmt.Errorf("natengine: %s.Local %s is also the pod of %q; a headless pod has one global IP", f, in.Local, s.ingress[j].name)
			}
			s.ownIP[rule.local] = i
		} else if _, dup := s.svcIP[rule.local]; !dup {
			s.svcIP[rule.local] = i
		}
		s.ingress = append(s.ingress, rule)
		s.byGlob[rule.global] = i
		s.owner[rule.global] = in.Name
	}
	return s, nil
}

func linkLocalOf(v6 bool) netip.Prefix {
	if v6 {
		return linkLocal6
	}
	return linkLocal4
}
