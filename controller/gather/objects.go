package gather

import (
	"context"
	"fmt"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	mcsv1a1 "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"
	"sigs.k8s.io/yaml"

	"github.com/snorkel-net/snorkel/controller/internal/statusline"
	"github.com/snorkel-net/snorkel/controller/servicesync"
)

// The resources gathered besides Submariner's own (submv1).
var (
	daemonSets     = appsv1.SchemeGroupVersion.WithResource("daemonsets")
	deployments    = appsv1.SchemeGroupVersion.WithResource("deployments")
	pods           = corev1.SchemeGroupVersion.WithResource("pods")
	secrets        = corev1.SchemeGroupVersion.WithResource("secrets")
	configMaps     = corev1.SchemeGroupVersion.WithResource("configmaps")
	endpointSlices = discoveryv1.SchemeGroupVersion.WithResource("endpointslices")
	serviceExports = mcsv1a1.SchemeGroupVersion.WithResource("serviceexports")
	serviceImports = mcsv1a1.SchemeGroupVersion.WithResource("serviceimports")
)

// lighthouseSlices selects the EndpointSlices the syncer writes.
var lighthouseSlices = metav1.ListOptions{LabelSelector: discoveryv1.LabelManagedBy + "=" + servicesync.ManagedBy}

// objects writes each object of gvr in namespace (all namespaces if
// empty) that opts selects to RESOURCE_NAMESPACE_NAME.yaml, and notes how
// many it found. A resource the cluster does not serve is a warning: its
// CRD is not installed.
func (c *cluster) objects(ctx context.Context, s *statusline.Section, dyn dynamic.Interface, gvr schema.GroupVersionResource, namespace string, opts metav1.ListOptions) {
	where := fmt.Sprintf("in namespace %q", namespace)
	if namespace == "" {
		where = "in any namespace"
	}
	if opts.LabelSelector != "" {
		where = fmt.Sprintf("by label selector %q %s", opts.LabelSelector, where)
	}
	if opts.FieldSelector != "" {
		where = fmt.Sprintf("by field selector %q %s", opts.FieldSelector, where)
	}
	list, err := dyn.Resource(gvr).Namespace(namespace).List(ctx, opts)
	switch {
	case apierrors.IsNotFound(err):
		s.Warn("No %s %s: the cluster does not serve %s (its CRD is not installed)", gvr.Resource, where, gvr.GroupResource())
		return
	case err != nil:
		s.Fail("Failed to gather %s %s: %v", gvr.Resource, where, err)
		return
	}
	s.Success("Found %d %s %s", len(list.Items), gvr.Resource, where)
	for i := range list.Items {
		u := &list.Items[i]
		if u.GetKind() == "" {
			// A list's items come without their kind; the redactor and
			// the reader of the file want it.
			u.SetAPIVersion(list.GetAPIVersion())
			u.SetKind(kindOf(list.GetKind()))
		}
		c.red.object(u)
		data, err := yaml.Marshal(u.Object)
		if err != nil {
			s.Fail("Failed to write %s %s/%s: %v", gvr.Resource, u.GetNamespace(), u.GetName(), err)
			continue
		}
		if err := c.write(gvr.Resource+"_"+u.GetNamespace()+"_"+u.GetName()+".yaml", data); err != nil {
			s.Fail("%v", err)
		}
	}
}

// kindOf is the kind of a list's items: "SecretList" holds Secrets.
func kindOf(listKind string) string {
	if kind, ok := strings.CutSuffix(listKind, "List"); ok && kind != "" {
		return kind
	}
	return listKind
}
