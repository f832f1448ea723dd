package servicesync

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	mcsv1a1 "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"
)

// ServiceExport condition reasons. Valid=False and Ready=False use
// Lighthouse's; the True reasons are the MCS API's, as metav1.Condition
// needs a reason where Lighthouse leaves it empty.
const (
	ReasonValid                  = "Valid"
	ReasonServiceUnavailable     = "ServiceUnavailable"
	ReasonUnsupportedServiceType = "UnsupportedServiceType"
	ReasonGlobalIPUnavailable    = "ServiceGlobalIPUnavailable"
	ReasonExported               = "Exported"
	ReasonExportFailed           = "ExportFailed"
)

// fieldManager names the Syncer in the objects' managed fields.
const fieldManager = "snorkel-servicesync"

// publication is what this cluster publishes on the broker for one
// exported service.
type publication struct {
	imp    *mcsv1a1.ServiceImport
	slices []*discoveryv1.EndpointSlice
	// clustersetConflict says how this cluster's clusterset IP setting
	// conflicts with the oldest export's; empty when it does not.
	clustersetConflict string
}

// syncExport makes the broker hold what this cluster exports of the
// service ns/name, and sets the ServiceExport's conditions.
func (s *Syncer) syncExport(ctx context.Context, ns, name string) error {
	se := s.export(ns, name)
	if se == nil {
		return s.withdraw(ctx, ns, name)
	}
	pub, valid := s.publication(se)
	if pub == nil {
		return errors.Join(s.withdraw(ctx, ns, name), s.setExportStatus(ctx, se, valid, nil, nil))
	}
	err := s.publish(ctx, pub)
	ready := metav1.Condition{Type: string(mcsv1a1.ServiceExportConditionReady), Status: metav1.ConditionTrue,
		Reason: ReasonExported, Message: "The service is exported to the broker."}
	if err != nil {
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, ReasonExportFailed, "Unable to export to the broker: "+err.Error()
	}
	conflict := s.conflictCondition(ns, name, pub.imp, pub.clustersetConflict)
	return errors.Join(err, s.setExportStatus(ctx, se, valid, &ready, &conflict))
}

// export is the ServiceExport ns/name, nil if there is none or it is
// being deleted.
func (s *Syncer) export(ns, name string) *mcsv1a1.ServiceExport {
	o, ok, _ := s.exports.GetIndexer().GetByKey(key(ns, name))
	if !ok {
		return nil
	}
	se := o.(*mcsv1a1.ServiceExport)
	if se.DeletionTimestamp != nil {
		return nil
	}
	return se
}

// publication builds what se publishes, or returns nil and the Valid
// condition saying why nothing can be.
func (s *Syncer) publication(se *mcsv1a1.ServiceExport) (*publication, metav1.Condition) {
	ns, name := se.Namespace, se.Name
	invalid := func(reason, format string, args ...any) (*publication, metav1.Condition) {
		return nil, metav1.Condition{Type: string(mcsv1a1.ServiceExportConditionValid), Status: metav1.ConditionFalse,
			Reason: reason, Message: fmt.Sprintf(format, args...)}
	}
	o, ok, _ := s.services.GetIndexer().GetByKey(key(ns, name))
	if !ok {
		return invalid(ReasonServiceUnavailable, "Service %s/%s to be exported does not exist.", ns, name)
	}
	svc := o.(*corev1.Service)
	typ, ok := importType(svc)
	if !ok {
		return invalid(ReasonUnsupportedServiceType,
			"Service %s/%s has type %s: only ClusterIP services, headless or not, can be exported.", ns, name, svc.Spec.Type)
	}
	ip := ""
	if typ == mcsv1a1.ClusterSetIP {
		ip = svc.Spec.ClusterIP
		if s.gips != nil {
			gip, ok := s.gips.ServiceGlobalIP(ns, name)
			if !ok {
				return invalid(ReasonGlobalIPUnavailable, "Service %s/%s does not have a global IP yet.", ns, name)
			}
			ip = gip
		}
		if ip == "" {
			return invalid(ReasonServiceUnavailable, "Service %s/%s has no ClusterIP yet.", ns, name)
		}
	}
	sources := s.sourceSlices(ns, name)
	pub := &publication{imp: brokerImport(s.cluster, s.brokerNS, se, svc, typ, ip)}
	valid := metav1.Condition{Type: string(mcsv1a1.ServiceExportConditionValid), Status: metav1.ConditionTrue,
		Reason: ReasonValid, Message: fmt.Sprintf("Service %s/%s is exported as %s.", ns, name, typ)}
	if typ == mcsv1a1.ClusterSetIP {
		want, unavailable := s.wantsClustersetIP(se)
		conflict, err := s.clustersetIP(pub.imp, want && unavailable == "")
		if err != nil {
			unavailable = err.Error()
		}
		if unavailable != "" {
			valid.Reason = ReasonClustersetIPUnavailable
			valid.Message = fmt.Sprintf("Service %s/%s is exported as %s without a clusterset IP: %s.", ns, name, typ, unavailable)
		}
		pub.clustersetConflict = conflict
		pub.slices = append(pub.slices, clusterIPSlice(s.cluster, s.brokerNS, svc, ip, sources))
	} else {
		for _, src := range sources {
			pub.slices = append(pub.slices, headlessSlice(s.cluster, s.brokerNS, svc, src, s.gips))
		}
	}
	return pub, valid
}

// sourceSlices are the cluster's own EndpointSlices of ns/name, by name.
func (s *Syncer) sourceSlices(ns, name string) []*discoveryv1.EndpointSlice {
	objs, _ := s.sources.GetIndexer().ByIndex(byService, key(ns, name))
	out := make([]*discoveryv1.EndpointSlice, 0, len(objs))
	for _, o := range objs {
		out = append(out, o.(*discoveryv1.EndpointSlice))
	}
	slices.SortFunc(out, func(a, b *discoveryv1.EndpointSlice) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// ownBrokerSlices are this cluster's slices of ns/name on the broker.
func (s *Syncer) ownBrokerSlices(ns, name string) []*discoveryv1.EndpointSlice {
	objs, _ := s.brokerSlices.GetIndexer().ByIndex(byService, key(ns, name))
	var out []*discoveryv1.EndpointSlice
	for _, o := range objs {
		if eps := o.(*discoveryv1.EndpointSlice); eps.Labels[LabelSourceCluster] == s.cluster {
			out = append(out, eps)
		}
	}
	return out
}

// publish writes pub to the broker and removes this cluster's slices of
// the service that pub no longer has.
func (s *Syncer) publish(ctx context.Context, pub *publication) error {
	o, _, _ := s.brokerImports.GetIndexer().GetByKey(key(s.brokerNS, pub.imp.Name))
	cached, _ := o.(*mcsv1a1.ServiceImport)
	done, err := applyImport(ctx, s.brokerMCS.MulticlusterV1alpha1().ServiceImports(s.brokerNS), cached, pub.imp)
	s.metrics.exported(done)
	if err != nil {
		return fmt.Errorf("ServiceImport %s/%s on the broker: %w", s.brokerNS, pub.imp.Name, err)
	}
	ns, name := pub.imp.Labels[LabelSourceNamespace], pub.imp.Labels[LabelServiceName]
	existing := s.ownBrokerSlices(ns, name)
	var errs []error
	for _, want := range pub.slices {
		var cached *discoveryv1.EndpointSlice
		if i := slices.IndexFunc(existing, func(e *discoveryv1.EndpointSlice) bool { return e.Name == want.Name }); i >= 0 {
			cached = existing[i]
		}
		if err := applySlice(ctx, s.broker, cached, want); err != nil {
			errs = append(errs, fmt.Errorf("EndpointSlice %s/%s on the broker: %w", s.brokerNS, want.Name, err))
		}
	}
	for _, e := range existing {
		if !slices.ContainsFunc(pub.slices, func(w *discoveryv1.EndpointSlice) bool { return w.Name == e.Name }) {
			errs = append(errs, s.deleteBrokerSlice(ctx, e.Name))
		}
	}
	return errors.Join(errs...)
}

// withdraw removes from the broker what this cluster published for
// ns/name. The members' copies follow when they see the broker's go.
func (s *Syncer) withdraw(ctx context.Context, ns, name string) error {
	var errs []error
	for _, e := range s.ownBrokerSlices(ns, name) {
		errs = append(errs, s.deleteBrokerSlice(ctx, e.Name))
	}
	imp := brokerImportName(ns, name, s.cluster)
	if _, ok, _ := s.brokerImports.GetIndexer().GetByKey(key(s.brokerNS, imp)); ok {
		err := s.brokerMCS.MulticlusterV1alpha1().ServiceImports(s.brokerNS).Delete(ctx, imp, metav1.DeleteOptions{})
		switch {
		case err == nil:
			s.metrics.exported(opDelete)
			s.log.Info("withdrew export", "service", key(ns, name))
		case apierrors.IsNotFound(err):
			s.log.Info("withdrew export", "service", key(ns, name))
		default:
			errs = append(errs, fmt.Errorf("deleting ServiceImport %s/%s on the broker: %w", s.brokerNS, imp, err))
		}
	}
	return errors.Join(errs...)
}

func (s *Syncer) deleteBrokerSlice(ctx context.Context, name string) error {
	err := s.broker.DiscoveryV1().EndpointSlices(s.brokerNS).Delete(ctx, name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting EndpointSlice %s/%s on the broker: %w", s.brokerNS, name, err)
	}
	return nil
}

// conflictCondition compares own, this cluster's ServiceImport, with the
// other clusters' on the broker; clustersetConflict, when not empty, is
// the clusterset IP setting's conflict.
func (s *Syncer) conflictCondition(ns, name string, own *mcsv1a1.ServiceImport, clustersetConflict string) metav1.Condition {
	exps := s.brokerExporters(ns, name)
	exps = slices.DeleteFunc(exps, func(e exporter) bool { return e.cluster == s.cluster })
	if e, ok := exporterOf(own); ok {
		exps = append(exps, e)
	}
	agg := aggregateOf(exps)
	status, reason, msg := agg.conflict()
	if clustersetConflict != "" {
		if status {
			reason, msg = reason+","+ReasonClustersetIPConflict, msg+"\n"+clustersetConflict
		} else {
			reason, msg = ReasonClustersetIPConflict, clustersetConflict
		}
		status = true
	}
	c := metav1.Condition{Type: string(mcsv1a1.ServiceExportConditionConflict), Status: metav1.ConditionFalse, Reason: reason, Message: msg}
	if status {
		c.Status = metav1.ConditionTrue
	}
	return c
}

// brokerExporters reads every cluster's ServiceImport of ns/name on the
// broker.
func (s *Syncer) brokerExporters(ns, name string) []exporter {
	objs, _ := s.brokerImports.GetIndexer().ByIndex(byService, key(ns, name))
	exps := make([]exporter, 0, len(objs))
	for _, o := range objs {
		if e, ok := exporterOf(o.(*mcsv1a1.ServiceImport)); ok {
			exps = append(exps, e)
		}
	}
	return exps
}

// setExportStatus sets the Valid condition and, when not nil, Ready and
// Conflict; nil removes them (a service that is not exported has
// neither). It writes only when something changed; a stale cache costs a
// read of the live ServiceExport and another try.
func (s *Syncer) setExportStatus(ctx context.Context, se *mcsv1a1.ServiceExport, valid metav1.Condition, ready, conflict *metav1.Condition) error {
	c := s.localMCS.MulticlusterV1alpha1().ServiceExports(se.Namespace)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		upd := se.DeepCopy()
		set := func(t mcsv1a1.ServiceExportConditionType, c *metav1.Condition) {
			if c == nil {
				meta.RemoveStatusCondition(&upd.Status.Conditions, string(t))
				return
			}
			c.ObservedGeneration = se.Generation
			meta.SetStatusCondition(&upd.Status.Conditions, *c)
		}
		set(mcsv1a1.ServiceExportConditionValid, &valid)
		set(mcsv1a1.ServiceExportConditionReady, ready)
		set(mcsv1a1.ServiceExportConditionConflict, conflict)
		if equality.Semantic.DeepEqual(se.Status.Conditions, upd.Status.Conditions) {
			return nil
		}
		_, err := c.UpdateStatus(ctx, upd, metav1.UpdateOptions{FieldManager: fieldManager})
		if apierrors.IsConflict(err) {
			if fresh, gerr := c.Get(ctx, se.Name, metav1.GetOptions{}); gerr == nil {
				se = fresh
			}
		}
		return err
	})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("status of ServiceExport %s/%s: %w", se.Namespace, se.Name, err)
	}
	return nil
}
