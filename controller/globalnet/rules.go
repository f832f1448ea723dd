package globalnet

import (
	"cmp"
	"maps"
	"net/netip"
	"reflect"
	"slices"
	"time"

	"k8s.io/client-go/tools/cache"

	v1 "github.com/snorkel-net/snorkel/controller/api/v1"
	"github.com/snorkel-net/snorkel/natengine"
)

// poolNamePrefix keeps the pools' rule names apart from the ingress
// rules' (namespace/service): Kubernetes names never hold a colon.
const poolNamePrefix = "egress:"

// rebuildRules derives the rules from the allocations and the caches,
// validates them with the NAT engine, and hands them to OnRules when they
// differ from the last; then it tells OnGlobalIP which services' global
// IPs changed.
func (r *runner) rebuildRules() {
	start := time.Now()
	rules, services, pods := r.buildRules()
	if err := r.validator.SetRules(rules); err != nil {
		// The rules are built to pass; this is a bug, so keep the last
		// good rules rather than hand the gateway bad ones.
		r.log.Error("globalnet: rules refused by the NAT engine; keeping the previous rules", "error", err)
		return
	}
	if r.last == nil || !reflect.DeepEqual(*r.last, rules) {
		r.last = &rules
		r.log.Debug("globalnet: rules", "pools", len(rules.Pools), "ingress", len(rules.Ingress), "took", time.Since(start))
		if r.cfg.OnRules != nil {
			r.cfg.OnRules(rules)
		}
	}
	for _, s := range r.ipam.publish(services, pods) {
		if r.cfg.OnGlobalIP != nil {
			r.cfg.OnGlobalIP(s.ns, s.name)
		}
	}
}

// buildRules returns the rules and the global IPs they give services and
// headless pods.
func (r *runner) buildRules() (natengine.Rules, map[nsName]netip.Addr, map[nsName]podGlobalIP) {
	rules := natengine.Rules{
		Local:   slices.Concat(r.cfg.ClusterCIDRs, r.cfg.ServiceCIDRs),
		Global:  r.cfg.GlobalCIDR,
		Remotes: r.ipam.remotesCopy(),
	}
	if st := r.egress[item{kind: kindClusterEgress, name: v1.ClusterGlobalEgressIPName}]; st != nil {
		rules.ClusterEgress = slices.Clone(st.ips)
	}
	rules.Pools = r.buildPools()
	services := map[nsName]netip.Addr{}
	pods := map[nsName]podGlobalIP{}
	rules.Ingress = r.buildIngress(services, pods)
	return rules, services, pods
}

// egressPool is a GlobalEgressIP with IPs, being turned into an EgressPool.
type egressPool struct {
	it item
	st *egressState
	p  natengine.EgressPool
}

// buildPools turns the GlobalEgressIPs into pools. A pod belongs to at most
// one pool of each kind: the oldest GlobalEgressIP that selects it (which
// one wins is not defined by Submariner either).
func (r *runner) buildPools() []natengine.EgressPool {
	var all []*egressPool
	byNS := map[string][]*egressPool{}
	for it, st := range r.egress {
		if it.kind != kindEgress || len(st.ips) == 0 {
			continue
		}
		kind := natengine.PoolNamespace
		if st.selector != nil {
			kind = natengine.PoolPodSelector
		}
		ep := &egressPool{it: it, st: st, p: natengine.EgressPool{
			Name: poolNamePrefix + it.ns + "/" + it.name, Kind: kind, IPs: slices.Clone(st.ips),
		}}
		all = append(all, ep)
		byNS[it.ns] = append(byNS[it.ns], ep)
	}
	// A pod IP seen twice (a stale pod) must not put one address in two
	// pools of a kind: the NAT engine refuses that.
	seen := map[natengine.PoolKind]map[netip.Addr]bool{natengine.PoolNamespace: {}, natengine.PoolPodSelector: {}}
	for _, ns := range slices.Sorted(maps.Keys(byNS)) {
		eps := byNS[ns]
		slices.SortFunc(eps, func(a, b *egressPool) int {
			return cmp.Or(a.st.created.Compare(b.st.created), cmp.Compare(a.it.name, b.it.name))
		})
		objs, _ := r.pods.GetIndexer().ByIndex(cache.NamespaceIndex, ns)
		for _, o := range objs {
			p := o.(*podInfo)
			if p.finished() || len(p.addrs) == 0 {
				continue
			}
			var nsPool, selPool *egressPool
			for _, ep := range eps {
				switch {
				case ep.st.selector == nil && nsPool == nil:
					nsPool = ep
				case ep.st.selector != nil && selPool == nil && ep.st.selector.Matches(p.labels):
					selPool = ep
				}
			}
			for _, ep := range []*egressPool{nsPool, selPool} {
				if ep == nil {
					continue
				}
				for _, a := range p.addrs {
					if !seen[ep.p.Kind][a] {
						seen[ep.p.Kind][a] = true
						ep.p.Members = append(ep.p.Members, netip.PrefixFrom(a, a.BitLen()))
					}
				}
			}
		}
	}
	slices.SortFunc(all, func(a, b *egressPool) int { return cmp.Compare(a.p.Name, b.p.Name) })
	out := make([]natengine.EgressPool, len(all))
	for k, ep := range all {
		slices.SortFunc(ep.p.Members, func(a, b netip.Prefix) int { return a.Addr().Compare(b.Addr()) })
		out[k] = ep.p
	}
	return out
}

// buildIngress turns the GlobalIngressIPs with IPs into ingress rules, and
// records the global IPs it gives into services and pods. A target that
// is missing or has no usable address is left out until it has one.
func (r *runner) buildIngress(services map[nsName]netip.Addr, pods map[nsName]podGlobalIP) []natengine.Ingress {
	keys := make([]item, 0, len(r.ingress))
	for it, st := range r.ingress {
		if st.ip.IsValid() {
			keys = append(keys, it)
		}
	}
	slices.SortFunc(keys, func(a, b item) int { return cmp.Or(cmp.Compare(a.ns, b.ns), cmp.Compare(a.name, b.name)) })
	var out []natengine.Ingress
	names := map[string]bool{}
	podLocal := map[netip.Addr]bool{}
	for _, it := range keys {
		st := r.ingress[it]
		in := natengine.Ingress{Global: st.ip}
		switch st.kind {
		case v1.ClusterIPService:
			local, ok := r.serviceAddr(it.ns, st.service)
			if !ok {
				continue
			}
			in.Name, in.Kind, in.Local = it.ns+"/"+st.service, natengine.IngressService, local
		case v1.HeadlessServicePod:
			p := r.pod(it.ns, st.pod)
			if p == nil {
				continue
			}
			if len(p.addrs) == 0 || podLocal[p.addrs[0]] {
				continue
			}
			podLocal[p.addrs[0]] = true
			in.Name, in.Kind, in.Local = it.ns+"/"+st.service+"/"+st.pod, natengine.IngressHeadlessPod, p.addrs[0]
		default:
			continue
		}
		if names[in.Name] {
			continue
		}
		names[in.Name] = true
		out = append(out, in)
		if in.Kind == natengine.IngressService {
			services[nsName{it.ns, st.service}] = st.ip
		} else {
			pods[nsName{it.ns, st.pod}] = podGlobalIP{ip: st.ip, service: st.service}
		}
	}
	return out
}

// serviceAddr returns the IPv4 ClusterIP of service ns/name, when it lies
// in the service CIDRs.
func (r *runner) serviceAddr(ns, name string) (netip.Addr, bool) {
	svc := r.service(ns, name)
	if svc == nil {
		return netip.Addr{}, false
	}
	ips := svc.Spec.ClusterIPs
	if len(ips) == 0 {
		ips = []string{svc.Spec.ClusterIP}
	}
	for _, s := range ips {
		a, err := netip.ParseAddr(s)
		if err != nil || !a.Is4() {
			continue
		}
		for _, c := range r.cfg.ServiceCIDRs {
			if c.Contains(a) {
				return a, true
			}
		}
	}
	if k := (nsName{ns, name}); !r.outside[k] {
		r.outside[k] = true
		r.log.Warn("globalnet: the ClusterIP of an exported service is outside this cluster's Service CIDRs, so its global IP leads nowhere; join again with the cluster's --servicecidr",
			"service", ns+"/"+name, "clusterIPs", ips, "serviceCIDRs", r.cfg.ServiceCIDRs)
	}
	return netip.Addr{}, false
}
