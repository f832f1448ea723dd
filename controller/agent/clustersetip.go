package agent

import (
	"cmp"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"
	mcsv1a1 "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"

	"github.com/snorkel-net/snorkel/controller/servicesync"
	"github.com/snorkel-net/snorkel/gateway"
)

// clusterset is what the agent needs to fill the gateway's clusterset IP
// section: the broker's range, this cluster's block, and informers on the
// merged ServiceImports and the imported EndpointSlices that the service
// sync writes in this cluster.
type clusterset struct {
	rng, block      netip.Prefix
	factories       []dynamicinformer.DynamicSharedInformerFactory
	imports, slices cache.SharedIndexInformer
}

var (
	serviceImportGVR = mcsv1a1.SchemeGroupVersion.WithResource("serviceimports")
	endpointSliceGVR = discoveryv1.SchemeGroupVersion.WithResource("endpointslices")
)

// newClusterset prepares the informers when this cluster has a clusterset
// IP block and service discovery, without Globalnet; nil otherwise. Every
// change wakes the leader's loop, which re-applies the spec if it changed.
func (a *Agent) newClusterset() *clusterset {
	m := a.cfg.Member
	rng, block, err := m.ClustersetIP()
	if err != nil || !block.IsValid() || !m.ServiceDiscovery || m.GlobalCIDR != "" {
		return nil
	}
	c := &clusterset{rng: rng, block: block}
	watch := func(gvr schema.GroupVersionResource, selector string) cache.SharedIndexInformer {
		f := dynamicinformer.NewFilteredDynamicSharedInformerFactory(a.localDyn, a.cfg.ResyncPeriod, metav1.NamespaceAll,
			func(o *metav1.ListOptions) { o.LabelSelector = selector })
		c.factories = append(c.factories, f)
		inf := f.ForResource(gvr).Informer()
		changed := func() { wake(a.reconcileCh) }
		_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(any) { changed() },
			UpdateFunc: func(any, any) { changed() },
			DeleteFunc: func(any) { changed() },
		})
		return inf
	}
	c.imports = watch(serviceImportGVR, servicesync.LabelManagedBy+"="+servicesync.ManagedBy)
	c.slices = watch(endpointSliceGVR, discoveryv1.LabelManagedBy+"="+servicesync.ManagedBy+","+servicesync.LabelIsHeadless+"=false")
	return c
}

func (c *clusterset) start(stop <-chan struct{}) {
	for _, f := range c.factories {
		f.Start(stop)
	}
}

func (c *clusterset) shutdown() {
	for _, f := range c.factories {
		f.Shutdown()
	}
}

func (c *clusterset) synced() []cache.InformerSynced {
	return []cache.InformerSynced{c.imports.HasSynced, c.slices.HasSynced}
}

// spec is the gateway's clusterset IP section: the broker's range, the
// gateway's own address in this cluster's block, and every merged
// ServiceImport with a VIP in the range, with its ports and the ready
// address of each cluster that exports it (its ClusterIP, from the
// imported EndpointSlice). owners are the CIDRs of the clusters the
// gateway knows, this one's and its remotes': a backend of another
// cluster, or outside its cluster's CIDRs, is left out until the gateway
// knows it, as the gateway refuses a spec that names it.
func (c *clusterset) spec(owners map[string][]netip.Prefix) *gateway.ClustersetIPSpec {
	s := &gateway.ClustersetIPSpec{CIDR: c.rng, SNATAddr: servicesync.ClustersetSNATAddr(c.block)}
	backends := map[string][]gateway.ClustersetBackend{} // by "ns/name"
	for _, o := range c.slices.GetStore().List() {
		eps, ok := convert[discoveryv1.EndpointSlice](o)
		if !ok || eps.Namespace != eps.Labels[servicesync.LabelSourceNamespace] {
			continue
		}
		cluster := eps.Labels[servicesync.LabelSourceCluster]
		k := eps.Namespace + "/" + eps.Labels[servicesync.LabelServiceName]
		for _, ep := range eps.Endpoints {
			if ep.Conditions.Ready != nil && !*ep.Conditions.Ready {
				continue
			}
			for _, v := range ep.Addresses {
				if addr, err := netip.ParseAddr(v); err == nil && addr.Is4() && containsAddr(owners[cluster], addr) {
					backends[k] = append(backends[k], gateway.ClustersetBackend{Cluster: cluster, Addr: addr})
				}
			}
		}
	}
	for _, o := range c.imports.GetStore().List() {
		si, ok := convert[mcsv1a1.ServiceImport](o)
		if !ok || si.Labels[servicesync.LabelSourceCluster] != "" || si.Spec.Type != mcsv1a1.ClusterSetIP || len(si.Spec.IPs) == 0 {
			continue
		}
		vip, err := netip.ParseAddr(si.Spec.IPs[0])
		if err != nil || !c.rng.Contains(vip) {
			continue
		}
		svc := gateway.ClustersetService{VIP: vip, Backends: backends[si.Namespace+"/"+si.Name]}
		for _, p := range si.Spec.Ports {
			if proto, ok := ipProto(p.Protocol); ok && p.Port > 0 && p.Port <= 65535 {
				svc.Ports = append(svc.Ports, gateway.ClustersetPort{Proto: proto, Port: uint16(p.Port)})
			}
		}
		slices.SortFunc(svc.Backends, func(a, b gateway.ClustersetBackend) int {
			return cmp.Or(strings.Compare(a.Cluster, b.Cluster), a.Addr.Compare(b.Addr))
		})
		svc.Backends = slices.Compact(svc.Backends)
		s.Services = append(s.Services, svc)
	}
	slices.SortFunc(s.Services, func(a, b gateway.ClustersetService) int { return a.VIP.Compare(b.VIP) })
	return s
}

func containsAddr(ps []netip.Prefix, a netip.Addr) bool {
	for _, p := range ps {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// ipProto is the IP protocol number of a Service port's protocol.
func ipProto(p corev1.Protocol) (uint8, bool) {
	switch p {
	case corev1.ProtocolTCP, "":
		return 6, true
	case corev1.ProtocolUDP:
		return 17, true
	case corev1.ProtocolSCTP:
		return 132, true
	}
	return 0, false
}

// convert reads a dynamic informer's object as T.
func convert[T any](o any) (*T, bool) {
	u, ok := o.(*unstructured.Unstructured)
	if !ok {
		return nil, false
	}
	var out T
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &out); err != nil {
		return nil, false
	}
	return &out, true
}
