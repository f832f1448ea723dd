package servicesync

import (
	"context"
	"errors"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	mcsv1a1 "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"

	"github.com/snorkel-net/snorkel/controller/api"
)

// syncImport makes this cluster hold the clusterset's view of the service
// ns/name: a ServiceImport named like the service, and a copy of each
// exporting cluster's EndpointSlices (this cluster's own included), in
// the service's namespace. Nothing is imported into a namespace that does
// not exist (MCS namespace sameness): the namespace's creation brings the
// service back here.
//
// Lighthouse 0.16 and later also keep one aggregate ServiceImport per
// service on the broker, written by every exporting cluster in turn;
// here each member merges the per-cluster ServiceImports itself, so no
// broker object has more than one writer.
func (s *Syncer) syncImport(ctx context.Context, ns, name string) error {
	agg := aggregateOf(s.brokerExporters(ns, name))
	s.releaseVIP(ns, name)
	live := len(agg.clusters) > 0 && s.namespaceReady(ns)
	if live {
		if err := s.applyLocalImport(ctx, ns, name, &agg); err != nil {
			return fmt.Errorf("ServiceImport %s/%s: %w", ns, name, err)
		}
	}
	var want []*discoveryv1.EndpointSlice
	if live {
		objs, _ := s.brokerSlices.GetIndexer().ByIndex(byService, key(ns, name))
		for _, o := range objs {
			if eps := o.(*discoveryv1.EndpointSlice); agg.exported(eps.Labels[LabelSourceCluster]) {
				want = append(want, localCopy(eps, ns))
			}
		}
	}
	var errs []error
	objs, _ := s.copies.GetIndexer().ByIndex(byService, key(ns, name))
	for _, w := range want {
		var cached *discoveryv1.EndpointSlice
		if i := slices.IndexFunc(objs, func(o any) bool { return o.(*discoveryv1.EndpointSlice).Name == w.Name }); i >= 0 {
			cached = objs[i].(*discoveryv1.EndpointSlice)
		}
		if err := applySlice(ctx, s.local, cached, w); err != nil {
			errs = append(errs, fmt.Errorf("EndpointSlice %s/%s: %w", ns, w.Name, err))
		}
	}
	for _, o := range objs {
		eps := o.(*discoveryv1.EndpointSlice)
		if slices.ContainsFunc(want, func(w *discoveryv1.EndpointSlice) bool { return w.Name == eps.Name }) {
			continue
		}
		err := s.local.DiscoveryV1().EndpointSlices(ns).Delete(ctx, eps.Name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("deleting EndpointSlice %s/%s: %w", ns, eps.Name, err))
		}
	}
	if !live {
		errs = append(errs, s.deleteLocalImport(ctx, ns, name))
	}
	return errors.Join(errs...)
}

// namespaceReady reports whether ns exists and is not being deleted.
func (s *Syncer) namespaceReady(ns string) bool {
	o, ok, _ := s.namespaces.GetIndexer().GetByKey(ns)
	return ok && o.(*corev1.Namespace).Status.Phase != corev1.NamespaceTerminating
}

// localImport is the cached ServiceImport ns/name; owned is false for one
// the Syncer did not create, which it leaves alone.
func (s *Syncer) localImport(ns, name string) (si *mcsv1a1.ServiceImport, owned bool) {
	o, ok, _ := s.imports.GetIndexer().GetByKey(key(ns, name))
	if !ok {
		return nil, true
	}
	si = o.(*mcsv1a1.ServiceImport)
	return si, si.Labels[LabelManagedBy] == ManagedBy
}

// applyLocalImport writes the merged ServiceImport: the first exporting
// cluster's type and session affinity, the merged ports, the clusters
// whose endpoints are imported, first exporter first, and the clusterset
// IP in spec.ips when the first export asks for one, annotated as
// Lighthouse annotates its aggregate.
func (s *Syncer) applyLocalImport(ctx context.Context, ns, name string, agg *aggregate) error {
	cached, owned := s.localImport(ns, name)
	if !owned {
		s.reportForeign(ns, name)
		return nil
	}
	first := agg.precedent()
	want := &mcsv1a1.ServiceImport{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{LabelManagedBy: ManagedBy}},
		Spec: mcsv1a1.ServiceImportSpec{
			Type:                  agg.typ,
			Ports:                 agg.ports,
			SessionAffinity:       first.spec.SessionAffinity,
			SessionAffinityConfig: first.spec.SessionAffinityConfig,
		},
	}
	for _, c := range agg.clusters {
		want.Status.Clusters = append(want.Status.Clusters, mcsv1a1.ClusterStatus{Cluster: c})
	}
	if agg.typ == mcsv1a1.ClusterSetIP && first.use != "" {
		want.Annotations = map[string]string{api.UseClustersetIPAnnotation: first.use}
		if vip, by := agg.clustersetIP(); vip.IsValid() {
			want.Spec.IPs = []string{vip.String()}
			want.Annotations[api.ClustersetIPAllocatedByAnnotation] = by
		}
	}
	done, err := applyImport(ctx, s.localMCS.MulticlusterV1alpha1().ServiceImports(ns), cached, want)
	s.metrics.imported(done)
	return err
}

// deleteLocalImport removes the ServiceImport ns/name if the Syncer owns it.
func (s *Syncer) deleteLocalImport(ctx context.Context, ns, name string) error {
	si, owned := s.localImport(ns, name)
	if si == nil || !owned {
		return nil
	}
	err := s.localMCS.MulticlusterV1alpha1().ServiceImports(ns).Delete(ctx, name, metav1.DeleteOptions{})
	switch {
	case err == nil:
		s.metrics.imported(opDelete)
	case !apierrors.IsNotFound(err):
		return fmt.Errorf("deleting ServiceImport %s/%s: %w", ns, name, err)
	}
	return nil
}

// reportForeign logs, once per ServiceImport, that one the Syncer does
// not own stands where it would import.
func (s *Syncer) reportForeign(ns, name string) {
	s.foreignMu.Lock()
	defer s.foreignMu.Unlock()
	if !s.foreign[key(ns, name)] {
		s.foreign[key(ns, name)] = true
		s.log.Warn("a ServiceImport without the label "+LabelManagedBy+"="+ManagedBy+
			" exists; it is left as it is and only the EndpointSlices are imported (delete it to let the Syncer manage it)",
			"serviceimport", key(ns, name))
	}
}

// localCopy is the member's copy of a broker EndpointSlice, in the
// service's namespace under the same name, labels and annotations.
func localCopy(eps *discoveryv1.EndpointSlice, ns string) *discoveryv1.EndpointSlice {
	c := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: eps.Name, Namespace: ns, Labels: eps.Labels, Annotations: eps.Annotations},
		AddressType: eps.AddressType,
		Endpoints:   eps.Endpoints,
		Ports:       eps.Ports,
	}
	return c.DeepCopy()
}
