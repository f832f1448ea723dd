package servicesync

import (
	"context"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	mcsv1a1 "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"
	mcstyped "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned/typed/apis/v1alpha1"
)

// applySlice makes the EndpointSlice want exist as given. cached is what
// the informer holds (nil if nothing): it spares a write when current. A
// stale cache costs a read of the live object and another try.
func applySlice(ctx context.Context, client kubernetes.Interface, cached, want *discoveryv1.EndpointSlice) error {
	c := client.DiscoveryV1().EndpointSlices(want.Namespace)
	cur := cached
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var err error
		if cur == nil {
			_, err = c.Create(ctx, want, metav1.CreateOptions{FieldManager: fieldManager})
			if !apierrors.IsAlreadyExists(err) {
				return err
			}
			if cur, err = c.Get(ctx, want.Name, metav1.GetOptions{}); err != nil {
				return err
			}
		}
		if sliceCurrent(cur, want) {
			return nil
		}
		upd := want.DeepCopy()
		upd.ResourceVersion = cur.ResourceVersion
		if _, err = c.Update(ctx, upd, metav1.UpdateOptions{FieldManager: fieldManager}); apierrors.IsConflict(err) {
			cur, _ = c.Get(ctx, want.Name, metav1.GetOptions{})
		}
		return err
	})
}

// sliceCurrent reports whether have holds what want says.
func sliceCurrent(have, want *discoveryv1.EndpointSlice) bool {
	return equality.Semantic.DeepEqual(have.Labels, want.Labels) &&
		equality.Semantic.DeepEqual(have.Annotations, want.Annotations) &&
		have.AddressType == want.AddressType &&
		equality.Semantic.DeepEqual(have.Endpoints, want.Endpoints) &&
		equality.Semantic.DeepEqual(have.Ports, want.Ports)
}

// applyImport makes the ServiceImport want exist as given: its labels,
// annotations and spec, and its status.clusters when want has any (the
// status is a subresource, written apart). cached is as for applySlice.
// It reports the write it made for the metrics: opCreate, opUpdate, or
// none when the object was current.
func applyImport(ctx context.Context, c mcstyped.ServiceImportInterface, cached, want *mcsv1a1.ServiceImport) (op, error) {
	cur := cached
	var done op
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		err := applyImportOnce(ctx, c, cur, want, &done)
		if apierrors.IsConflict(err) {
			cur, _ = c.Get(ctx, want.Name, metav1.GetOptions{})
		}
		return err
	})
	return done, err
}

// applyImportOnce is one try of applyImport; done keeps the first write
// that succeeded across tries.
func applyImportOnce(ctx context.Context, c mcstyped.ServiceImportInterface, cur, want *mcsv1a1.ServiceImport, done *op) error {
	wrote := func(o op) {
		if *done == "" {
			*done = o
		}
	}
	var err error
	if cur == nil {
		cur, err = c.Create(ctx, want, metav1.CreateOptions{FieldManager: fieldManager})
		switch {
		case apierrors.IsAlreadyExists(err):
			cur, err = c.Get(ctx, want.Name, metav1.GetOptions{})
		case err == nil:
			wrote(opCreate)
		}
		if err != nil {
			return err
		}
	}
	if !equality.Semantic.DeepEqual(cur.Labels, want.Labels) ||
		!equality.Semantic.DeepEqual(cur.Annotations, want.Annotations) ||
		!equality.Semantic.DeepEqual(cur.Spec, want.Spec) {
		upd := cur.DeepCopy()
		upd.Labels, upd.Annotations, upd.Spec = want.Labels, want.Annotations, want.Spec
		if cur, err = c.Update(ctx, upd, metav1.UpdateOptions{FieldManager: fieldManager}); err != nil {
			return err
		}
		wrote(opUpdate)
	}
	if !equality.Semantic.DeepEqual(cur.Status.Clusters, want.Status.Clusters) {
		upd := cur.DeepCopy()
		upd.Status.Clusters = want.Status.Clusters
		if _, err = c.UpdateStatus(ctx, upd, metav1.UpdateOptions{FieldManager: fieldManager}); err == nil {
			wrote(opUpdate)
		}
	}
	return err
}
