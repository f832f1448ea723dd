package deploy

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
)

// Apply applies objs in order with server-side apply under FieldManager,
// taking over fields other managers set; with dryRun the API server checks
// and admits each object but stores nothing. The kinds must be served
// when Apply starts (apply CRDs first, with ApplyCRDs).
func Apply(ctx context.Context, cfg *rest.Config, objs []*unstructured.Unstructured, dryRun bool) error {
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return err
	}
	groups, err := restmapper.GetAPIGroupResources(dc)
	if err != nil {
		return fmt.Errorf("deploy: discovering the API server's resources: %w", err)
	}
	mapper := restmapper.NewDiscoveryRESTMapper(groups)
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	// Strict: a field the API does not know is an error, not a warning, so
	// that a misspelt manifest fails where it is applied.
	opts := metav1.PatchOptions{FieldManager: FieldManager, Force: new(true), FieldValidation: "Strict"}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	for _, u := range objs {
		gvk := u.GroupVersionKind()
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			return fmt.Errorf("deploy: %s %s: %w", u.GetKind(), u.GetName(), err)
		}
		var r dynamic.ResourceInterface = dyn.Resource(m.Resource)
		if m.Scope.Name() == meta.RESTScopeNameNamespace {
			if u.GetNamespace() == "" {
				return fmt.Errorf("deploy: %s %s has no namespace", u.GetKind(), u.GetName())
			}
			r = dyn.Resource(m.Resource).Namespace(u.GetNamespace())
		}
		b, err := u.MarshalJSON()
		if err != nil {
			return err
		}
		if _, err := r.Patch(ctx, u.GetName(), types.ApplyPatchType, b, opts); err != nil {
			return fmt.Errorf("deploy: applying %s %s: %w", u.GetKind(), objectName(u), err)
		}
	}
	return nil
}

// objectName is ns/name, or name for a cluster-scoped object.
func objectName(u *unstructured.Unstructured) string {
	if u.GetNamespace() == "" {
		return u.GetName()
	}
	return u.GetNamespace() + "/" + u.GetName()
}
