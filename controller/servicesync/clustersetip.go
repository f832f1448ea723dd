package servicesync

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"strconv"
	"sync"

	mcsv1a1 "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"

	"github.com/snorkel-net/snorkel/controller/api"
)

// Clusterset IP condition reasons: Lighthouse's for the conflict, and
// Snorkel's for an export that asks for a clusterset IP this cluster
// cannot give (Valid stays True: the service is exported without one).
const (
	ReasonClustersetIPConflict    = "ConflictingClusterSetIPEnablement"
	ReasonClustersetIPUnavailable = "ClusterSetIPUnavailable"
)

// AnnotationClustersetIP holds, on a cluster's ServiceImport on the
// broker, the service's clusterset IP. Lighthouse keeps it in the spec.ips
// of its aggregate ServiceImport on the broker; here each cluster's
// ServiceImport carries it beside its own address, so that it outlives
// the export of the cluster that allocated it.
const AnnotationClustersetIP = "snorkel.io/clusterset-ip"

// ClustersetIPConfig is this cluster's share of the clusterset IPs.
type ClustersetIPConfig struct {
	// CIDR is this cluster's block (join --clusterset-ip-cidr); the VIPs
	// of the services this cluster exports first come from it.
	CIDR netip.Prefix
	// Default is whether a ServiceExport without the annotation
	// api.UseClustersetIPAnnotation gets a clusterset IP (join
	// --enable-clusterset-ip).
	Default bool
}

func (c *ClustersetIPConfig) validate() error {
	if !c.CIDR.IsValid() || !c.CIDR.Addr().Is4() || c.CIDR != c.CIDR.Masked() || c.CIDR.Bits() > 30 {
		return fmt.Errorf("servicesync: Config.ClustersetIP.CIDR %s: give an IPv4 network of at least 4 addresses, such as 243.0.0.0/20", c.CIDR)
	}
	return nil
}

// ClustersetSNATAddr is the gateway's own address in a cluster's block:
// its first host address, which no service gets.
func ClustersetSNATAddr(block netip.Prefix) netip.Addr {
	return block.Masked().Addr().Next()
}

// vipPool hands out the clusterset IPs of this cluster's block, one per
// service key. Its state is rebuilt at start from the broker's
// ServiceImports that carry a VIP this cluster allocated.
type vipPool struct {
	block netip.Prefix

	mu    sync.Mutex
	bySvc map[string]netip.Addr
	used  map[netip.Addr]string
}

func newVIPPool(block netip.Prefix) *vipPool {
	return &vipPool{block: block.Masked(), bySvc: map[string]netip.Addr{}, used: map[netip.Addr]string{}}
}

// usable reports whether a may be a service's VIP: in the block, and not
// its network, broadcast or SNAT address.
func (p *vipPool) usable(a netip.Addr) bool {
	return p.block.Contains(a) && a != p.block.Addr() && a != ClustersetSNATAddr(p.block) && a != lastAddr(p.block)
}

// lastAddr is the highest address of an IPv4 prefix, its broadcast.
func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().As4()
	v := binary.BigEndian.Uint32(b[:]) | uint32(uint64(1)<<(32-p.Bits())-1)
	binary.BigEndian.PutUint32(b[:], v)
	return netip.AddrFrom4(b)
}

// reserve records a as svc's VIP; false if a is not usable or another
// service holds it.
func (p *vipPool) reserve(svc string, a netip.Addr) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.usable(a) {
		return false
	}
	if other, ok := p.used[a]; ok {
		return other == svc
	}
	if old, ok := p.bySvc[svc]; ok {
		delete(p.used, old)
	}
	p.bySvc[svc], p.used[a] = a, svc
	return true
}

// allocate returns svc's VIP, taking the lowest free address for a
// service that has none.
func (p *vipPool) allocate(svc string) (netip.Addr, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if a, ok := p.bySvc[svc]; ok {
		return a, nil
	}
	for a := p.block.Addr(); p.block.Contains(a); a = a.Next() {
		if _, taken := p.used[a]; !taken && p.usable(a) {
			p.bySvc[svc], p.used[a] = a, svc
			return a, nil
		}
	}
	return netip.Addr{}, fmt.Errorf("this cluster's clusterset IP CIDR %s has no free address left (%d services hold one); unexport services, or join with a larger --clusterset-ip-cidr", p.block, len(p.bySvc))
}

// release frees svc's VIP, if it has one.
func (p *vipPool) release(svc string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if a, ok := p.bySvc[svc]; ok {
		delete(p.bySvc, svc)
		delete(p.used, a)
	}
}

// held reports svc's VIP.
func (p *vipPool) held(svc string) (netip.Addr, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	a, ok := p.bySvc[svc]
	return a, ok
}

// wantsClustersetIP is whether se asks for a clusterset IP: its
// annotation, else the cluster's default. unavailable says why this
// cluster cannot give one when it is asked for; empty when it can.
func (s *Syncer) wantsClustersetIP(se *mcsv1a1.ServiceExport) (want bool, unavailable string) {
	if v, ok := se.Annotations[api.UseClustersetIPAnnotation]; ok {
		want, _ = strconv.ParseBool(v)
	} else {
		want = s.csDefault
	}
	switch {
	case !want:
		return false, ""
	case s.gips != nil:
		return true, "clusterset IPs are not supported with Globalnet, as in Submariner; remove the annotation " + api.UseClustersetIPAnnotation
	case s.vips == nil:
		return true, "this cluster has no clusterset IP CIDR; join it again (snorkel join) with a broker deployed by a Snorkel that records the clusterset IP range"
	}
	return true, ""
}

// clustersetIP decides what own, this cluster's ServiceImport of a
// ClusterSetIP service on the broker, says about the clusterset IP: its
// setting use, and the VIP when it has one. The oldest export decides
// whether the service has a clusterset IP; a later export that says
// otherwise is a conflict (the message), and publishes no VIP. A VIP
// already on another cluster's ServiceImport is reused; the oldest
// exporter allocates one from its block when there is none.
func (s *Syncer) clustersetIP(own *mcsv1a1.ServiceImport, use bool) (conflict string, err error) {
	own.Annotations[api.UseClustersetIPAnnotation] = strconv.FormatBool(use)
	ns, name := own.Labels[LabelSourceNamespace], own.Labels[LabelServiceName]
	svcKey := key(ns, name)
	mine, _ := exporterOf(own)
	// The VIP this cluster published before stays its own to carry on.
	if o, ok, _ := s.brokerImports.GetIndexer().GetByKey(key(s.brokerNS, own.Name)); ok {
		if was, ok := exporterOf(o.(*mcsv1a1.ServiceImport)); ok && was.vip.IsValid() {
			mine.vip, mine.vipBy = was.vip, was.vipBy
		}
	}
	exps := []exporter{mine}
	for _, e := range s.brokerExporters(ns, name) {
		if e.cluster != s.cluster && e.spec.Type == mcsv1a1.ClusterSetIP {
			exps = append(exps, e)
		}
	}
	agg := aggregateOf(exps)
	first := agg.precedent()
	if first.cluster != s.cluster && first.useClustersetIP() != use {
		by := first.vipBy
		if by == "" {
			by = first.cluster
		}
		return fmt.Sprintf("The local service clusterset IP enablement setting %q conflicts with the enablement setting %q determined by the first exporting cluster %q.",
			strconv.FormatBool(use), strconv.FormatBool(first.useClustersetIP()), by), nil
	}
	if !use {
		return "", nil
	}
	vip, by := agg.clustersetIP()
	if vip.IsValid() && by != s.cluster && s.vips != nil {
		// Another cluster's VIP won; one this cluster took is not used.
		if a, ok := s.vips.held(svcKey); ok && a != vip {
			s.vips.release(svcKey)
		}
	}
	if !vip.IsValid() && first.cluster == s.cluster && s.vips != nil {
		if vip, err = s.vips.allocate(svcKey); err != nil {
			return "", err
		}
		by = s.cluster
	}
	if vip.IsValid() {
		own.Annotations[AnnotationClustersetIP] = vip.String()
		own.Annotations[api.ClustersetIPAllocatedByAnnotation] = by
	}
	return "", nil
}

// rebuildVIPs takes back, at start, the VIPs of this cluster's block that
// the broker's ServiceImports carry.
func (s *Syncer) rebuildVIPs() {
	if s.vips == nil {
		return
	}
	for _, o := range s.brokerImports.GetStore().List() {
		si := o.(*mcsv1a1.ServiceImport)
		e, ok := exporterOf(si)
		svcKey, known := serviceKeyOfLabels(si.Labels)
		if !ok || !known || e.vipBy != s.cluster || !e.vip.IsValid() {
			continue
		}
		if !s.vips.reserve(svcKey, e.vip) {
			s.log.Warn("a ServiceImport on the broker carries a clusterset IP this cluster cannot take back (outside its block, or another service's)",
				"serviceimport", si.Name, "clustersetIP", e.vip)
		}
	}
}

// releaseVIP frees the VIP of ns/name once no cluster exports the service
// and this cluster has no ServiceExport of it.
func (s *Syncer) releaseVIP(ns, name string) {
	if s.vips == nil || s.export(ns, name) != nil {
		return
	}
	if objs, _ := s.brokerImports.GetIndexer().ByIndex(byService, key(ns, name)); len(objs) == 0 {
		s.vips.release(key(ns, name))
	}
}
