package broker

import (
	"context"
	"errors"
	"fmt"

	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	mcsv1a1 "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"

	"github.com/snorkel-net/snorkel/controller/api"
	submv1 "github.com/snorkel-net/snorkel/controller/api/v1"
)

// Labels that name the cluster a ServiceImport or EndpointSlice on the
// broker came from: the MCS one, and Lighthouse's older one.
const (
	SourceClusterLabel       = "multicluster.kubernetes.io/source-cluster"
	legacySourceClusterLabel = "lighthouse.submariner.io/sourceCluster"
)

var (
	serviceImportResource = mcsv1a1.SchemeGroupVersion.WithResource("serviceimports")
	endpointSliceResource = discoveryv1.SchemeGroupVersion.WithResource("endpointslices")
)

// Leave removes everything of cluster clusterID from the broker namespace
// ns of the broker brokerCfg reaches: its EndpointSlices, ServiceImports
// and Endpoints, its Globalnet record (freeing its global CIDR), its
// clusterset IP record (freeing its block) and its Cluster object. The
// broker token of broker-info.subm suffices. Leaving
// again, or leaving a cluster that never joined, does nothing.
func Leave(ctx context.Context, brokerCfg *rest.Config, ns, clusterID string) error {
	if err := api.ValidateClusterID(clusterID); err != nil {
		return err
	}
	dc, err := dynamic.NewForConfig(brokerCfg)
	if err != nil {
		return err
	}
	kc, err := kubernetes.NewForConfig(brokerCfg)
	if err != nil {
		return err
	}
	bySource := func(u *unstructured.Unstructured) bool {
		l := u.GetLabels()
		return l[SourceClusterLabel] == clusterID || l[legacySourceClusterLabel] == clusterID
	}
	byEndpointCluster := func(u *unstructured.Unstructured) bool {
		id, _, _ := unstructured.NestedString(u.Object, "spec", "cluster_id")
		return id == clusterID || u.GetLabels()[api.ClusterIDLabel] == clusterID
	}
	var errs []error
	for _, r := range []struct {
		gvr   schema.GroupVersionResource
		match func(*unstructured.Unstructured) bool
	}{
		{endpointSliceResource, bySource},
		{serviceImportResource, bySource},
		{submv1.EndpointResource, byEndpointCluster},
	} {
		if err := deleteMatching(ctx, dc.Resource(r.gvr).Namespace(ns), r.match); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", r.gvr.GroupResource(), err))
		}
	}
	if err := releaseGlobalCIDR(ctx, kc, ns, clusterID); err != nil {
		errs = append(errs, fmt.Errorf("the Globalnet ConfigMap %s/%s: %w", ns, api.GlobalnetConfigMapName, err))
	}
	if err := releaseClustersetIPCIDR(ctx, kc, ns, clusterID); err != nil {
		errs = append(errs, fmt.Errorf("the clusterset IP ConfigMap %s/%s: %w", ns, api.ClustersetIPConfigMapName, err))
	}
	// The Cluster goes last: while it is there a failed leave can be
	// recognised and run again.
	if len(errs) == 0 {
		err := dc.Resource(submv1.ClusterResource).Namespace(ns).Delete(ctx, clusterID, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("the Cluster %s/%s: %w", ns, clusterID, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("cluster %q leaving the broker: %w", clusterID, err)
	}
	return nil
}

// deleteMatching deletes the objects of r that match; a resource the
// broker does not serve has nothing to delete.
func deleteMatching(ctx context.Context, r dynamic.ResourceInterface, match func(*unstructured.Unstructured) bool) error {
	list, err := r.List(ctx, metav1.ListOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	for i := range list.Items {
		u := &list.Items[i]
		if !match(u) {
			continue
		}
		if err := r.Delete(ctx, u.GetName(), metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	return nil
}
