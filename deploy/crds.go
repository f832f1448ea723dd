// Package deploy holds what Snorkel installs into a cluster: the
// submariner.io CustomResourceDefinitions under crds/, and with them the
// Multi-Cluster Services API's as sigs.k8s.io/mcs-api publishes them, all
// embedded so that the snorkel binary can apply them itself.
package deploy

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"sort"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	mcscrd "sigs.k8s.io/mcs-api/config/crd"
	"sigs.k8s.io/yaml"
)

//go:embed crds/*.yaml
var crdFiles embed.FS

var crdResource = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// FieldManager is the server-side apply field manager of everything Snorkel
// applies.
const FieldManager = "snorkel"

// CRDs returns the CustomResourceDefinitions, by file name.
func CRDs() (map[string]*unstructured.Unstructured, error) {
	names, err := fs.Glob(crdFiles, "crds/*.yaml")
	if err != nil {
		return nil, err
	}
	files := map[string][]byte{
		"multicluster.x-k8s.io_serviceexports.yaml": mcscrd.ServiceExportCRD,
		"multicluster.x-k8s.io_serviceimports.yaml": mcscrd.ServiceImportCRD,
	}
	for _, n := range names {
		if files[path.Base(n)], err = crdFiles.ReadFile(n); err != nil {
			return nil, err
		}
	}
	out := map[string]*unstructured.Unstructured{}
	for n, b := range files {
		u := &unstructured.Unstructured{}
		if err := yaml.UnmarshalStrict(b, &u.Object); err != nil {
			return nil, fmt.Errorf("deploy: %s: %w", n, err)
		}
		out[n] = u
	}
	return out, nil
}

// ApplyCRDs applies every CustomResourceDefinition with server-side apply
// (dry-run only if dryRun) and, unless dry-running, waits until each is
// established and its API is served.
func ApplyCRDs(ctx context.Context, cfg *rest.Config, dryRun bool) error {
	crds, err := CRDs()
	if err != nil {
		return err
	}
	dc, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	names := make([]string, 0, len(crds))
	for n := range crds {
		names = append(names, n)
	}
	sort.Strings(names)
	opts := metav1.PatchOptions{FieldManager: FieldManager, Force: new(true)}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	for _, n := range names {
		b, err := crds[n].MarshalJSON()
		if err != nil {
			return err
		}
		if _, err := dc.Resource(crdResource).Patch(ctx, crds[n].GetName(), types.ApplyPatchType, b, opts); err != nil {
			return fmt.Errorf("deploy: applying %s: %w", n, err)
		}
	}
	if dryRun {
		return nil
	}
	dsc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return err
	}
	for _, n := range names {
		name := crds[n].GetName()
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, crdWait, true, func(ctx context.Context) (bool, error) {
			u, err := dc.Resource(crdResource).Get(ctx, name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return false, nil
			}
			if err != nil {
				return false, err
			}
			return established(u) && served(dsc, u), nil
		})
		if err != nil {
			return fmt.Errorf("deploy: CRD %s not established and served within %v: %w", name, crdWait, err)
		}
	}
	return nil
}

// crdWait bounds the wait for an applied CRD's API: an API server
// establishes a CRD within a second when idle, and within seconds on a
// busy control plane.
const crdWait = 2 * time.Minute

// established reports whether the CRD u has the condition Established.
func established(u *unstructured.Unstructured) bool {
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] == "Established" && m["status"] == "True" {
			return true
		}
	}
	return false
}

// served reports whether discovery lists the CRD u's resource in each of
// its served versions. The API server publishes discovery a moment after
// it establishes a CRD, and clients that map kinds to resources (apply,
// kubectl) go by discovery.
func served(dc discovery.DiscoveryInterface, u *unstructured.Unstructured) bool {
	group, _, _ := unstructured.NestedString(u.Object, "spec", "group")
	plural, _, _ := unstructured.NestedString(u.Object, "spec", "names", "plural")
	versions, _, _ := unstructured.NestedSlice(u.Object, "spec", "versions")
	for _, v := range versions {
		m, _ := v.(map[string]any)
		if ok, _ := m["served"].(bool); !ok {
			continue
		}
		name, _ := m["name"].(string)
		l, err := dc.ServerResourcesForGroupVersion(group + "/" + name)
		if err != nil || !slices.ContainsFunc(l.APIResources, func(r metav1.APIResource) bool { return r.Name == plural }) {
			return false
		}
	}
	return true
}
