package servicesync

import (
	"context"
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	mcsclient "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned"
)

// RemoveCluster deletes from the broker's namespace every ServiceImport
// and EndpointSlice the cluster clusterID published (those labelled
// multicluster.kubernetes.io/source-cluster=clusterID): the cleanup when
// a cluster leaves, after its Syncer has stopped. The other members'
// Syncers then remove their copies. It deletes one object at a time, so
// the broker token's delete verb suffices.
func RemoveCluster(ctx context.Context, broker *rest.Config, namespace, clusterID string) error {
	if errs := validation.IsDNS1123Label(clusterID); len(errs) > 0 {
		return fmt.Errorf("servicesync: cluster ID %q: %s", clusterID, errs[0])
	}
	kc, err := kubernetes.NewForConfig(broker)
	if err != nil {
		return fmt.Errorf("servicesync: broker client: %w", err)
	}
	mc, err := mcsclient.NewForConfig(broker)
	if err != nil {
		return fmt.Errorf("servicesync: broker MCS client: %w", err)
	}
	sel := metav1.ListOptions{LabelSelector: LabelSourceCluster + "=" + clusterID}
	var errs []error
	notFound := func(err error) error {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err
	}
	slices, err := kc.DiscoveryV1().EndpointSlices(namespace).List(ctx, sel)
	if err != nil {
		return fmt.Errorf("servicesync: listing cluster %s's EndpointSlices in broker namespace %s: %w", clusterID, namespace, err)
	}
	for _, eps := range slices.Items {
		if err := notFound(kc.DiscoveryV1().EndpointSlices(namespace).Delete(ctx, eps.Name, metav1.DeleteOptions{})); err != nil {
			errs = append(errs, fmt.Errorf("servicesync: deleting EndpointSlice %s/%s: %w", namespace, eps.Name, err))
		}
	}
	imports, err := mc.MulticlusterV1alpha1().ServiceImports(namespace).List(ctx, sel)
	if err != nil {
		return errors.Join(append(errs, fmt.Errorf("servicesync: listing cluster %s's ServiceImports in broker namespace %s: %w", clusterID, namespace, err))...)
	}
	for _, si := range imports.Items {
		if err := notFound(mc.MulticlusterV1alpha1().ServiceImports(namespace).Delete(ctx, si.Name, metav1.DeleteOptions{})); err != nil {
			errs = append(errs, fmt.Errorf("servicesync: deleting ServiceImport %s/%s: %w", namespace, si.Name, err))
		}
	}
	return errors.Join(errs...)
}
