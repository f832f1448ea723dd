package gateway

import (
	"fmt"
	"net/netip"
	"strings"

	"golang.zx2c4.com/wireguard/tun"

	"github.com/snorkel-net/snorkel/natengine"
	"github.com/snorkel-net/snorkel/packet"
)

// Clusterset IPs: the VIPs that MCS ServiceImports carry when a service is
// exported with --use-clusterset-ip. The route agents send the clusterset
// IP range to the active gateway, which routes it into its TUN; packets to
// a VIP are given to a backend by natengine.Clusterset. A connection to a
// remote backend then goes through the tunnel like any packet to that
// remote's CIDRs, and one to the local backend is written back to the TUN
// from the SNAT address, whose replies the range's route brings back.

// DefaultClustersetIPCIDR is the clusterset IP range deploy-broker gives
// by default, as Lighthouse does.
const DefaultClustersetIPCIDR = "243.0.0.0/8"

// Protocol names of ClustersetIPPort, as Kubernetes spells them.
var clustersetProtos = map[string]uint8{"TCP": packet.ProtoTCP, "UDP": packet.ProtoUDP, "SCTP": 132}

// ClustersetIP is the clusterset IP section of the file.
type ClustersetIP struct {
	// CIDR is the clusterset's VIP range; default 243.0.0.0/8.
	CIDR string `json:"cidr,omitempty"`
	// SNATAddress is this gateway's address in the range, never a VIP:
	// connections to a local backend leave from it.
	SNATAddress string                `json:"snatAddress"`
	Services    []ClustersetIPService `json:"services,omitempty"`
}

// ClustersetIPService is one VIP: its ports and the clusters that back it.
type ClustersetIPService struct {
	VIP      string                `json:"vip"`
	Ports    []ClustersetIPPort    `json:"ports,omitempty"`
	Backends []ClustersetIPBackend `json:"backends,omitempty"`
}

// ClustersetIPPort is a port of a VIP; Protocol is TCP (default), UDP or
// SCTP.
type ClustersetIPPort struct {
	Protocol string `json:"protocol,omitempty"`
	Port     int    `json:"port"`
}

// ClustersetIPBackend is one cluster's address for the service (its
// ClusterIP there); Cluster is cluster.id or a remote's id.
type ClustersetIPBackend struct {
	Cluster string `json:"cluster"`
	Address string `json:"address"`
}

// parseClustersetIP turns the file's clusterset IP section into s's.
func (c *Config) parseClustersetIP(errs *errList, s *Spec) {
	cc := c.ClustersetIP
	if cc == nil {
		return
	}
	cs := &ClustersetIPSpec{}
	if cc.CIDR != "" {
		p, err := netip.ParsePrefix(cc.CIDR)
		if err != nil {
			errs.add("clustersetIP.cidr", "%q is not a CIDR; write it like %s", cc.CIDR, DefaultClustersetIPCIDR)
		}
		cs.CIDR = p
	}
	if cc.SNATAddress != "" {
		a, err := netip.ParseAddr(cc.SNATAddress)
		if err != nil || a.Zone() != "" {
			errs.add("clustersetIP.snatAddress", "%q is not an IP address; write an address of this cluster's part of clustersetIP.cidr, like 243.1.255.254", cc.SNATAddress)
		}
		cs.SNATAddr = a.Unmap()
	}
	for i, sv := range cc.Services {
		f := fmt.Sprintf("clustersetIP.services[%d]", i)
		var svc ClustersetService
		a, err := netip.ParseAddr(sv.VIP)
		if err != nil || a.Zone() != "" {
			errs.add(f+".vip", "%q is not an IP address; write the service's clusterset IP, like 243.1.0.5", sv.VIP)
		}
		svc.VIP = a.Unmap()
		for j, p := range sv.Ports {
			pf := fmt.Sprintf("%s.ports[%d]", f, j)
			proto := p.Protocol
			if proto == "" {
				proto = "TCP"
			}
			n, ok := clustersetProtos[strings.ToUpper(proto)]
			if !ok {
				errs.add(pf+".protocol", "%q is not a protocol; use TCP, UDP or SCTP", p.Protocol)
			}
			if p.Port < 1 || p.Port > 65535 {
				errs.add(pf+".port", "%d is not a port; use 1 to 65535", p.Port)
			}
			svc.Ports = append(svc.Ports, ClustersetPort{Proto: n, Port: uint16(p.Port)})
		}
		for j, b := range sv.Backends {
			a, err := netip.ParseAddr(b.Address)
			if err != nil || a.Zone() != "" {
				errs.add(fmt.Sprintf("%s.backends[%d].address", f, j), "%q is not an IP address; write the service's ClusterIP in cluster %q", b.Address, b.Cluster)
			}
			svc.Backends = append(svc.Backends, ClustersetBackend{Cluster: b.Cluster, Addr: a.Unmap()})
		}
		cs.Services = append(cs.Services, svc)
	}
	s.ClustersetIP = cs
}

// clustersetConfig renders s's clusterset IP section for the file.
func (s *Spec) clustersetConfig() *ClustersetIP {
	cs := s.ClustersetIP
	if cs == nil {
		return nil
	}
	c := &ClustersetIP{}
	if cs.CIDR.IsValid() {
		c.CIDR = cs.CIDR.String()
	}
	if cs.SNATAddr.IsValid() {
		c.SNATAddress = cs.SNATAddr.String()
	}
	for _, sv := range cs.Services {
		out := ClustersetIPService{VIP: sv.VIP.String()}
		for _, p := range sv.Ports {
			name := fmt.Sprint(p.Proto)
			for n, v := range clustersetProtos {
				if v == p.Proto {
					name = n
				}
			}
			out.Ports = append(out.Ports, ClustersetIPPort{Protocol: name, Port: int(p.Port)})
		}
		for _, b := range sv.Backends {
			out.Backends = append(out.Backends, ClustersetIPBackend{Cluster: b.Cluster, Address: b.Addr.String()})
		}
		c.Services = append(c.Services, out)
	}
	return c
}

// deriveClustersetIP checks s's clusterset IP section: the VIPs and the
// SNAT address in the range, which no cluster's CIDRs overlap; every
// backend a configured cluster's, at an address routed to that cluster.
func (s *Spec) deriveClustersetIP(errs *errList, d *spec) {
	cs := s.ClustersetIP
	if cs == nil {
		return
	}
	if s.Globalnet != nil {
		errs.add("clustersetIP", "cannot be used with globalnet: clusterset IPs are carried between clusters whose CIDRs do not overlap (Lighthouse does not support them under Globalnet either); remove the clustersetIP section, or turn Globalnet off")
		return
	}
	cidr := cs.CIDR
	switch {
	case !cidr.IsValid():
		errs.add("clustersetIP.cidr", "is not a CIDR; write it like %s", DefaultClustersetIPCIDR)
		return
	case cidr != cidr.Masked():
		errs.add("clustersetIP.cidr", "%s has host bits set; did you mean %s?", cidr, cidr.Masked())
		return
	case cidr.Overlaps(linkLocal):
		errs.add("clustersetIP.cidr", "%s overlaps %s, which Calico uses for its pods' gateway; choose another range (default %s)", cidr, linkLocal, DefaultClustersetIPCIDR)
		return
	}
	owners := map[string][]netip.Prefix{s.Cluster.ID: d.local}
	for _, r := range d.remotes {
		owners[r.id] = r.cidrs
	}
	for _, p := range d.local {
		if p.Overlaps(cidr) {
			errs.add("clustersetIP.cidr", "%s overlaps %s of cluster %q; choose a range no cluster's pods or services use (default %s)", cidr, p, s.Cluster.ID, DefaultClustersetIPCIDR)
			return
		}
	}
	for _, r := range d.remotes {
		for _, p := range r.cidrs {
			if p.Overlaps(cidr) {
				errs.add("clustersetIP.cidr", "%s overlaps %s of cluster %q; choose a range no cluster's pods or services use (default %s)", cidr, p, r.id, DefaultClustersetIPCIDR)
				return
			}
		}
	}
	snat := cs.SNATAddr
	switch {
	case !snat.IsValid():
		errs.add("clustersetIP.snatAddress", "is required; give this gateway an address of this cluster's part of %s that no service has, like the last one", cidr)
	case !cidr.Contains(snat):
		errs.add("clustersetIP.snatAddress", "%s is not in clustersetIP.cidr %s; give an address of this cluster's part of it", snat, cidr)
	}
	vips := map[netip.Addr]string{}
	for i, sv := range cs.Services {
		f := fmt.Sprintf("clustersetIP.services[%d]", i)
		switch {
		case !sv.VIP.IsValid():
			errs.add(f+".vip", "is not set; give the service's clusterset IP (its ServiceImport's spec.ips)")
		case !cidr.Contains(sv.VIP):
			errs.add(f+".vip", "%s is not in clustersetIP.cidr %s; clusterset IPs are allocated from that range", sv.VIP, cidr)
		case sv.VIP == snat:
			errs.add(f+".vip", "%s is clustersetIP.snatAddress, which is the gateway's own; give the service another address", sv.VIP)
		case vips[sv.VIP] != "":
			errs.add(f+".vip", "%s is already the VIP of %s; list each VIP once, with all its ports and backends", sv.VIP, vips[sv.VIP])
		default:
			vips[sv.VIP] = f
		}
		ports := map[ClustersetPort]int{}
		for j, p := range sv.Ports {
			pf := fmt.Sprintf("%s.ports[%d]", f, j)
			switch p.Proto {
			case packet.ProtoTCP, packet.ProtoUDP, 132:
			default:
				errs.add(pf+".protocol", "%d is not a protocol a service port has; use TCP (6), UDP (17) or SCTP (132)", p.Proto)
			}
			if p.Port == 0 {
				errs.add(pf+".port", "is 0; use the service's port, 1 to 65535")
			} else if k, dup := ports[p]; dup {
				errs.add(pf, "is ports[%d] again; list each port once", k)
			}
			ports[p] = j
		}
		clusters := map[string]int{}
		for j, b := range sv.Backends {
			bf := fmt.Sprintf("%s.backends[%d]", f, j)
			cidrs, known := owners[b.Cluster]
			switch k, dup := clusters[b.Cluster]; {
			case !known:
				errs.add(bf+".cluster", "%q names no cluster of this gateway; use cluster.id (%q) or a remote's id", b.Cluster, s.Cluster.ID)
				continue
			case dup:
				errs.add(bf+".cluster", "cluster %q is already backends[%d]; give each cluster's address once", b.Cluster, k)
				continue
			}
			clusters[b.Cluster] = j
			switch {
			case !b.Addr.IsValid():
				errs.add(bf+".address", "is not set; give the service's ClusterIP in cluster %q", b.Cluster)
			case sv.VIP.IsValid() && b.Addr.Is4() != sv.VIP.Is4():
				errs.add(bf+".address", "%s is not of the VIP's IP family; give the service's ClusterIP of that family in cluster %q", b.Addr, b.Cluster)
			case !containsAddr(cidrs, b.Addr):
				errs.add(bf+".address", "%s is not in cluster %q's podCIDRs or serviceCIDRs; give the service's ClusterIP in that cluster", b.Addr, b.Cluster)
			}
		}
	}
	d.clusterset = &clustersetSpec{cidr: cidr}
}

// parsedAddr is a as packet.Parsed holds it.
func parsedAddr(a netip.Addr) [16]byte {
	if a.Is4() {
		v := a.As4()
		return [16]byte{v[0], v[1], v[2], v[3]}
	}
	return a.As16()
}

func containsAddr(ps []netip.Prefix, a netip.Addr) bool {
	for _, p := range ps {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// clustersetSpec is what the gateway derives from a valid clusterset IP
// section.
type clustersetSpec struct {
	cidr netip.Prefix
}

// clustersetState is the clusterset IP range in force and its engine; the
// data path reads it with one atomic load per packet.
type clustersetState struct {
	addr [16]byte // the range's first address, as packet.Parsed holds it
	bits int
	snat [16]byte
	v6   bool
	eng  *natengine.Clusterset
}

// covers reports whether decoded address a of IP version v is in the range.
func (c *clustersetState) covers(v uint8, a *[16]byte) bool {
	if (v == 6) != c.v6 {
		return false
	}
	n := c.bits
	for i := 0; n > 0; i++ {
		m := byte(0xff)
		if n < 8 {
			m = ^byte(0xff >> n)
		}
		if a[i]&m != c.addr[i] {
			return false
		}
		n -= 8
	}
	return true
}

// clustersetEgress hands the engine a packet read from the device for the
// clusterset IP range. A client's packet is first held to the tunnel MTU as
// a routed packet is, so that a "fragmentation needed" quotes the packet the
// client sent, to the VIP.
func (g *Gateway) clustersetEgress(dev tun.Device, cs *clustersetState, icmp [][]byte, pkt []byte, p *packet.Parsed, pathMTU int) natengine.VIPVerdict {
	if p.Length > pathMTU && p.Dst != cs.snat {
		if p.Version == 6 || p.DontFragment {
			g.sendTooBig(dev, icmp, pkt, p, pathMTU)
		}
		g.unattributed().drops[dropTooBig].Add(1)
		return natengine.VIPDrop
	}
	return cs.eng.Egress(pkt, p)
}

// setClusterset gives the data path next's clusterset IPs, with the
// remotes' slots of rs, or takes them away. The engine and its connections
// stay across changes: SetRules ends only those whose VIP or backend went.
func (g *Gateway) setClusterset(next *spec, rs *remoteSet) error {
	cs := next.ClustersetIP
	e := g.csEngine.Load()
	if cs == nil {
		g.clusterset.Store(nil)
		if e != nil {
			// Connections left from before would come back to life with
			// the section: end them.
			return e.SetRules(natengine.ClustersetRules{})
		}
		return nil
	}
	if e == nil {
		var err error
		if e, err = natengine.NewClusterset(natengine.ClustersetConfig{Up: g.remoteUp}); err != nil {
			return err
		}
		g.csEngine.Store(e)
	}
	slot := map[string]int{next.Cluster.ID: natengine.LocalPeer}
	for i, r := range next.remotes {
		slot[r.id] = rs.slots[i]
	}
	r := natengine.ClustersetRules{SNAT: cs.SNATAddr}
	for _, sv := range cs.Services {
		v := natengine.VIPService{VIP: sv.VIP}
		for _, p := range sv.Ports {
			v.Ports = append(v.Ports, natengine.VIPPort{Proto: p.Proto, Port: p.Port})
		}
		for _, b := range sv.Backends {
			v.Backends = append(v.Backends, natengine.VIPBackend{Peer: slot[b.Cluster], Addr: b.Addr})
		}
		r.Services = append(r.Services, v)
	}
	if err := e.SetRules(r); err != nil {
		return fmt.Errorf("clustersetIP: %w", err)
	}
	p := next.clusterset.cidr
	st := &clustersetState{bits: p.Bits(), v6: p.Addr().Is6(), eng: e}
	st.addr, st.snat = parsedAddr(p.Addr()), parsedAddr(cs.SNATAddr)
	g.clusterset.Store(st)
	return nil
}

// remoteUp reports whether a new connection to a VIP may go to the remote
// in slot: with health probes, when its probes are answered; without,
// unless it has been silent for long (a remote never heard from counts as
// up, as nothing else would ever send it traffic).
func (g *Gateway) remoteUp(slot int) bool {
	rs := g.set.Load()
	st := rs.state(slot)
	if st == nil {
		return false
	}
	if h := rs.health; h != nil && slot < len(h.probers) && h.probers[slot] != nil {
		p := h.probers[slot]
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.status == statusConnected
	}
	return connectionStatus(g.now.Load(), st.c.lastRx.Load()) != statusError
}

// ClustersetIPStatus are the clusterset IP engine's counters.
type ClustersetIPStatus struct {
	CIDR        netip.Prefix      `json:"cidr"`
	Services    int               `json:"services"`
	Connections int               `json:"connections"`
	LocalFlows  uint64            `json:"localConnectionsTotal"`
	RemoteFlows uint64            `json:"remoteConnectionsTotal"`
	Translated  uint64            `json:"translatedPackets"`
	Expired     uint64            `json:"expired"`
	Retired     uint64            `json:"retired"`
	Drops       map[string]uint64 `json:"drops,omitempty"`
}

func (g *Gateway) clustersetStatus() *ClustersetIPStatus {
	cs, e := g.set.Load().spec.ClustersetIP, g.csEngine.Load()
	if cs == nil || e == nil {
		return nil
	}
	s := e.Stats()
	out := &ClustersetIPStatus{CIDR: cs.CIDR, Services: len(cs.Services), Connections: s.Flows, LocalFlows: s.LocalFlows,
		RemoteFlows: s.RemoteFlows, Translated: s.Translated, Expired: s.Expired, Retired: s.Retired}
	for r, v := range s.Drops {
		if v > 0 {
			if out.Drops == nil {
				out.Drops = map[string]uint64{}
			}
			out.Drops[natengine.VIPDropReason(r).String()] = v
		}
	}
	return out
}
