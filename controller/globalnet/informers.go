package globalnet

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/dynamic/dynamicinformer"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/tools/cache"

	v1 "github.com/snorkel-net/snorkel/controller/api/v1"
)

// byService indexes GlobalIngressIPs by namespace/service, the service of
// spec.serviceRef.
const byService = "service"

func giipService(obj any) ([]string, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return nil, nil
	}
	name, _, _ := unstructured.NestedString(u.Object, "spec", "serviceRef", "name")
	if name == "" {
		return nil, nil
	}
	return []string{u.GetNamespace() + "/" + name}, nil
}

func (r *runner) newInformers(md metadata.Interface) {
	nsIndex := cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}
	client := r.cfg.Local

	r.pods = coreinformers.NewFilteredPodInformer(client, metav1.NamespaceAll, 0, nsIndex, nil)
	_ = r.pods.SetTransform(r.slimPod)
	_, _ = r.pods.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { r.podChanged(nil, asPod(o)) },
		UpdateFunc: func(o, n any) { r.podChanged(asPod(o), asPod(n)) },
		DeleteFunc: func(o any) { r.podChanged(asPod(o), nil) },
	})

	r.services = coreinformers.NewFilteredServiceInformer(client, metav1.NamespaceAll, 0, nsIndex, nil)
	_ = r.services.SetTransform(slimService)
	r.handle(r.services, func(o any) {
		r.queue.Add(itemOf(kindExport, o))
		r.rulesChanged()
	})

	r.exports = metadatainformer.NewFilteredMetadataInformer(md, serviceExportResource, metav1.NamespaceAll, 0, nsIndex, nil).Informer()
	_ = r.exports.SetTransform(slimMeta)
	r.handle(r.exports, func(o any) { r.queue.Add(itemOf(kindExport, o)) })

	r.cgeips = dynamicinformer.NewFilteredDynamicInformer(r.dyn, v1.ClusterGlobalEgressIPResource, metav1.NamespaceAll, 0, cache.Indexers{}, nil).Informer()
	_ = r.cgeips.SetTransform(slimMeta)
	r.handle(r.cgeips, func(o any) { r.queue.Add(itemOf(kindClusterEgress, o)) })

	r.geips = dynamicinformer.NewFilteredDynamicInformer(r.dyn, v1.GlobalEgressIPResource, metav1.NamespaceAll, 0, nsIndex, nil).Informer()
	_ = r.geips.SetTransform(slimMeta)
	r.handle(r.geips, func(o any) { r.queue.Add(itemOf(kindEgress, o)) })

	r.giips = dynamicinformer.NewFilteredDynamicInformer(r.dyn, v1.GlobalIngressIPResource, metav1.NamespaceAll, 0,
		cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc, byService: giipService}, nil).Informer()
	_ = r.giips.SetTransform(slimMeta)
	r.handle(r.giips, func(o any) {
		r.queue.Add(itemOf(kindIngress, o))
		r.queueIngressService(o)
	})
}

// handle calls f with every object inf adds, changes or deletes.
func (r *runner) handle(inf cache.SharedIndexInformer, f func(any)) {
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    f,
		UpdateFunc: func(_, n any) { f(n) },
		DeleteFunc: f,
	})
}

// itemOf is the item of kind k for obj, which may be a deletion's final
// state.
func itemOf(k kind, obj any) item {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		ns, name, _ := cache.SplitMetaNamespaceKey(d.Key)
		return item{kind: k, ns: ns, name: name}
	}
	m, err := metaOf(obj)
	if err != nil {
		return item{kind: k}
	}
	return item{kind: k, ns: m.GetNamespace(), name: m.GetName()}
}

func metaOf(obj any) (metav1.Object, error) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	return meta.Accessor(obj)
}

// queueIngressService queues the service a GlobalIngressIP refers to, so
// that one deleted by hand is made again while the export lasts and one
// left from an export that went is deleted.
func (r *runner) queueIngressService(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	keys, _ := giipService(obj)
	for _, k := range keys {
		ns, name, _ := cache.SplitMetaNamespaceKey(k)
		r.queue.Add(item{kind: kindExport, ns: ns, name: name})
	}
}

// podChanged queues what a pod's change may touch: the exported headless
// services that select it, and the rules (egress pool members, headless pod
// addresses).
func (r *runner) podChanged(old, cur *podInfo) {
	if old != nil && cur != nil && samePod(old, cur) {
		return
	}
	r.rulesChanged()
	p := cur
	if p == nil {
		p = old
	}
	if p == nil {
		return
	}
	exports, _ := r.exports.GetIndexer().ByIndex(cache.NamespaceIndex, p.Namespace)
	for _, e := range exports {
		m, err := metaOf(e)
		if err != nil {
			continue
		}
		svc := r.service(p.Namespace, m.GetName())
		if svc == nil || len(svc.Spec.Selector) == 0 {
			continue
		}
		sel := labels.SelectorFromValidatedSet(svc.Spec.Selector)
		if (old != nil && sel.Matches(old.labels)) || (cur != nil && sel.Matches(cur.labels)) {
			r.queue.Add(item{kind: kindExport, ns: p.Namespace, name: svc.Name})
		}
	}
}

// The transforms keep only what the IPAM reads, so that the caches of a
// large cluster stay small.

func slimService(obj any) (any, error) {
	s, ok := obj.(*corev1.Service)
	if !ok {
		return obj, nil
	}
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{
			Name: s.Name, Namespace: s.Namespace, UID: s.UID, ResourceVersion: s.ResourceVersion,
		},
		Spec: corev1.ServiceSpec{
			Type: s.Spec.Type, ClusterIP: s.Spec.ClusterIP, ClusterIPs: s.Spec.ClusterIPs,
			Selector: s.Spec.Selector, PublishNotReadyAddresses: s.Spec.PublishNotReadyAddresses,
		},
	}, nil
}

// slimMeta drops managedFields, the bulk of a small object.
func slimMeta(obj any) (any, error) {
	if m, err := meta.Accessor(obj); err == nil {
		m.SetManagedFields(nil)
	}
	return obj, nil
}
