package v1

import (
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

// Object is one of this package's API types.
type Object interface {
	Cluster | Endpoint | Gateway | ClusterGlobalEgressIP | GlobalEgressIP | GlobalIngressIP
}

// FromUnstructured converts an object the dynamic client returned.
func FromUnstructured[T Object](u *unstructured.Unstructured) (*T, error) {
	var out T
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &out); err != nil {
		return nil, fmt.Errorf("%s %s/%s: %w", u.GetKind(), u.GetNamespace(), u.GetName(), err)
	}
	return &out, nil
}

// ToUnstructured converts obj for the dynamic client, setting its
// apiVersion and kind.
func ToUnstructured[T Object](obj *T, kind string) (*unstructured.Unstructured, error) {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, err
	}
	u := &unstructured.Unstructured{Object: m}
	u.SetAPIVersion(Group + "/" + Version)
	u.SetKind(kind)
	return u, nil
}
