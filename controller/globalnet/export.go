package globalnet

import (
	"context"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	v1 "github.com/snorkel-net/snorkel/controller/api/v1"
)

// Submariner's label and annotation on the GlobalIngressIPs of headless
// pods.
const (
	// ServiceRefLabel names the exported headless service of a pod's
	// GlobalIngressIP.
	ServiceRefLabel = "submariner.io/serviceRef"
	// HeadlessPodIPAnnotation holds the pod IP behind a pod's
	// GlobalIngressIP.
	HeadlessPodIPAnnotation = "submariner.io/headless-svc-pod-ip"
)

// PodIngressName is the name of the GlobalIngressIP of a pod of an
// exported headless service, as Submariner names it: "pod-" and the first
// 59 characters of the pod's name.
func PodIngressName(pod string) string { return fmt.Sprintf("pod-%.59s", pod) }

// wanted is a GlobalIngressIP an export calls for.
type wanted struct {
	target
	podIP string
}

func (r *runner) service(ns, name string) *corev1.Service {
	obj, ok, _ := r.services.GetStore().GetByKey(ns + "/" + name)
	if !ok {
		return nil
	}
	s, _ := obj.(*corev1.Service)
	return s
}

func (r *runner) pod(ns, name string) *podInfo {
	obj, ok, _ := r.pods.GetStore().GetByKey(ns + "/" + name)
	if !ok {
		return nil
	}
	p, _ := obj.(*podInfo)
	return p
}

// exportedService returns service ns/name when a ServiceExport exports it
// and it is of type ClusterIP (Globalnet serves no other type).
func (r *runner) exportedService(ns, name string) *corev1.Service {
	if _, ok, _ := r.exports.GetStore().GetByKey(ns + "/" + name); !ok {
		return nil
	}
	svc := r.service(ns, name)
	if svc == nil || (svc.Spec.Type != "" && svc.Spec.Type != corev1.ServiceTypeClusterIP) {
		return nil
	}
	return svc
}

func headless(svc *corev1.Service) bool { return svc.Spec.ClusterIP == corev1.ClusterIPNone }

// eligible says whether a selected pod gets a global IP. As Submariner
// does: once it has an IP and runs, ready or not, or before it runs when
// the service publishes not-ready addresses. Unlike Submariner, a pod that
// has finished gives its global IP back: its pod IP may go to another pod.
func eligible(p *podInfo, svc *corev1.Service) bool {
	if p.ip == "" || p.finished() {
		return false
	}
	return svc.Spec.PublishNotReadyAddresses || p.phase == corev1.PodRunning
}

// claims says whether exported headless service ns/svc gives pod a global
// IP.
func (r *runner) claims(ns, svcName string, p *podInfo) bool {
	svc := r.exportedService(ns, svcName)
	if svc == nil || !headless(svc) || len(svc.Spec.Selector) == 0 || p == nil {
		return false
	}
	return labels.SelectorFromValidatedSet(svc.Spec.Selector).Matches(p.labels) && eligible(p, svc)
}

// wantedIngress returns the GlobalIngressIPs service ns/name calls for, by
// name: one for an exported ClusterIP service, one per eligible pod of an
// exported headless service with a selector.
func (r *runner) wantedIngress(ns, name string) map[string]wanted {
	out := map[string]wanted{}
	svc := r.exportedService(ns, name)
	switch {
	case svc == nil:
	case !headless(svc):
		out[name] = wanted{target: target{kind: v1.ClusterIPService, service: name}}
	case len(svc.Spec.Selector) > 0:
		sel := labels.SelectorFromValidatedSet(svc.Spec.Selector)
		pods, _ := r.pods.GetIndexer().ByIndex(cache.NamespaceIndex, ns)
		for _, o := range pods {
			p := o.(*podInfo)
			if sel.Matches(p.labels) && eligible(p, svc) {
				out[PodIngressName(p.Name)] = wanted{target: target{kind: v1.HeadlessServicePod, service: name, pod: p.Name}, podIP: p.ip}
			}
		}
	}
	return out
}

// processExport makes the GlobalIngressIPs of service it match what its
// export calls for: it creates the missing ones and deletes those no
// longer called for. A pod of two exported headless services has one
// GlobalIngressIP, labelled with one of them; it moves to the other when
// the first lets the pod go.
func (r *runner) processExport(ctx context.Context, it item) error {
	want := r.wantedIngress(it.ns, it.name)
	have, _ := r.giips.GetIndexer().ByIndex(byService, it.ns+"/"+it.name)
	for _, o := range have {
		u := o.(*unstructured.Unstructured)
		g, err := v1.FromUnstructured[v1.GlobalIngressIP](u)
		if err != nil {
			continue
		}
		t, _ := targetOf(g)
		if w, ok := want[u.GetName()]; ok && w.target == t {
			delete(want, u.GetName())
			if err := r.fixPodIngress(ctx, u, w); err != nil {
				return err
			}
			continue
		}
		if t.kind == v1.HeadlessServicePod {
			if other := r.otherClaimant(it.ns, it.name, t.pod); other != "" {
				if err := r.relabel(ctx, u, other); err != nil {
					return err
				}
				continue
			}
		}
		if err := r.deleteIngress(ctx, u); err != nil {
			return err
		}
	}
	for name, w := range want {
		if o, exists, _ := r.giips.GetStore().GetByKey(it.ns + "/" + name); exists {
			// Another service's, for a pod both select: it keeps the pod
			// while it claims it, and hands it over when it stops.
			r.log.Debug("globalnet: GlobalIngressIP belongs to another service", "name", name, "service", it.name,
				"owner", o.(*unstructured.Unstructured).GetLabels()[ServiceRefLabel])
			continue
		}
		if err := r.createIngress(ctx, it.ns, name, w); err != nil {
			return err
		}
	}
	return nil
}

// otherClaimant returns another exported headless service of namespace ns
// that claims pod, or "".
func (r *runner) otherClaimant(ns, svcName, pod string) string {
	p := r.pod(ns, pod)
	if p == nil {
		return ""
	}
	exports, _ := r.exports.GetIndexer().ByIndex(cache.NamespaceIndex, ns)
	best := ""
	for _, e := range exports {
		m, err := metaOf(e)
		if err != nil || m.GetName() == svcName {
			continue
		}
		if r.claims(ns, m.GetName(), p) && (best == "" || m.GetName() < best) {
			best = m.GetName()
		}
	}
	return best
}

func (r *runner) createIngress(ctx context.Context, ns, name string, w wanted) error {
	g := &v1.GlobalIngressIP{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: v1.GlobalIngressIPSpec{
			Target:     w.kind,
			ServiceRef: &corev1.LocalObjectReference{Name: w.service},
		},
	}
	if w.kind == v1.HeadlessServicePod {
		g.Labels = map[string]string{ServiceRefLabel: w.service}
		g.Annotations = map[string]string{HeadlessPodIPAnnotation: w.podIP}
		g.Spec.PodRef = &corev1.LocalObjectReference{Name: w.pod}
	}
	u, err := v1.ToUnstructured(g, "GlobalIngressIP")
	if err != nil {
		return err
	}
	_, err = r.dyn.Resource(v1.GlobalIngressIPResource).Namespace(ns).Create(ctx, u, metav1.CreateOptions{FieldManager: fieldManager})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating GlobalIngressIP %s/%s: %w", ns, name, err)
	}
	return nil
}

func (r *runner) deleteIngress(ctx context.Context, u *unstructured.Unstructured) error {
	uid := u.GetUID()
	err := r.dyn.Resource(v1.GlobalIngressIPResource).Namespace(u.GetNamespace()).Delete(ctx, u.GetName(),
		metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("deleting GlobalIngressIP %s/%s: %w", u.GetNamespace(), u.GetName(), err)
	}
	return nil
}

// fixPodIngress brings a pod's GlobalIngressIP's label and pod IP
// annotation up to date.
func (r *runner) fixPodIngress(ctx context.Context, u *unstructured.Unstructured, w wanted) error {
	if w.kind != v1.HeadlessServicePod {
		return nil
	}
	if u.GetLabels()[ServiceRefLabel] == w.service && u.GetAnnotations()[HeadlessPodIPAnnotation] == w.podIP {
		return nil
	}
	return r.patchMeta(ctx, u, map[string]any{
		"metadata": map[string]any{
			"labels":      map[string]any{ServiceRefLabel: w.service},
			"annotations": map[string]any{HeadlessPodIPAnnotation: w.podIP},
		},
	})
}

// relabel hands a pod's GlobalIngressIP, and its global IP, to another
// service that exports the pod.
func (r *runner) relabel(ctx context.Context, u *unstructured.Unstructured, svc string) error {
	return r.patchMeta(ctx, u, map[string]any{
		"metadata": map[string]any{"labels": map[string]any{ServiceRefLabel: svc}},
		"spec":     map[string]any{"serviceRef": map[string]any{"name": svc}},
	})
}

func (r *runner) patchMeta(ctx context.Context, u *unstructured.Unstructured, patch map[string]any) error {
	b, err := json.Marshal(patch)
	if err != nil {
		return err
	}
	_, err = r.dyn.Resource(v1.GlobalIngressIPResource).Namespace(u.GetNamespace()).Patch(ctx, u.GetName(), types.MergePatchType, b,
		metav1.PatchOptions{FieldManager: fieldManager})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("updating GlobalIngressIP %s/%s: %w", u.GetNamespace(), u.GetName(), err)
	}
	return nil
}
