package globalnet

import (
	"maps"
	"net/netip"
	"slices"
	"strings"
	"unique"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"
)

// podInfo is what the IPAM keeps of a pod: a corev1.Pod, even empty, costs
// a kilobyte and a half, and a large cluster has many pods.
type podInfo struct {
	metav1.ObjectMeta // name, namespace, resourceVersion, deletion
	labels            labelList
	phase             corev1.PodPhase
	ip                string       // status.podIP
	addrs             []netip.Addr // the IPv4 pod IPs inside the cluster CIDRs
}

// slimPod turns a Pod into a podInfo as the informer stores it. Namespaces
// and labels repeat across pods, so their strings are interned.
func (r *runner) slimPod(obj any) (any, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	pi := &podInfo{
		ObjectMeta: metav1.ObjectMeta{
			// Cloned: the decoded strings sit among the garbage of the
			// whole decoded pod, and would keep its memory spans alive.
			Name: strings.Clone(p.Name), Namespace: intern(p.Namespace), ResourceVersion: strings.Clone(p.ResourceVersion),
			DeletionTimestamp: p.DeletionTimestamp,
		},
		labels: newLabelList(p.Labels),
		phase:  p.Status.Phase,
		ip:     strings.Clone(p.Status.PodIP),
	}
	add := func(s string) {
		a, err := netip.ParseAddr(s)
		if err != nil || !a.Is4() || slices.Contains(pi.addrs, a) {
			return
		}
		for _, c := range r.cfg.ClusterCIDRs {
			if c.Contains(a) {
				pi.addrs = append(pi.addrs, a)
				return
			}
		}
	}
	for _, ip := range p.Status.PodIPs {
		add(ip.IP)
	}
	add(p.Status.PodIP)
	return pi, nil
}

func intern(s string) string { return unique.Make(s).Value() }

func asPod(obj any) *podInfo {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	p, _ := obj.(*podInfo)
	return p
}

// samePod reports whether nothing the IPAM reads changed.
func samePod(a, b *podInfo) bool {
	return a.phase == b.phase && a.ip == b.ip && slices.Equal(a.addrs, b.addrs) && slices.Equal(a.labels, b.labels) &&
		(a.DeletionTimestamp == nil) == (b.DeletionTimestamp == nil)
}

// finished says whether a pod is done or going: its IP may soon be
// another pod's.
func (p *podInfo) finished() bool {
	return p.DeletionTimestamp != nil || p.phase == corev1.PodSucceeded || p.phase == corev1.PodFailed
}

// labelList is a pod's labels as sorted key, value pairs: a tenth of the
// memory of a small map. It serves label selectors.
type labelList []string

var _ labels.Labels = labelList(nil)

func newLabelList(m map[string]string) labelList {
	if len(m) == 0 {
		return nil
	}
	l := make(labelList, 0, 2*len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		l = append(l, intern(k), intern(m[k]))
	}
	return l
}

// Lookup implements labels.Labels.
func (l labelList) Lookup(key string) (string, bool) {
	lo, hi := 0, len(l)/2
	for lo < hi {
		mid := (lo + hi) / 2
		switch k := l[2*mid]; {
		case k == key:
			return l[2*mid+1], true
		case k < key:
			lo = mid + 1
		default:
			hi = mid
		}
	}
	return "", false
}

// Has implements labels.Labels.
func (l labelList) Has(key string) bool {
	_, ok := l.Lookup(key)
	return ok
}

// Get implements labels.Labels.
func (l labelList) Get(key string) string {
	v, _ := l.Lookup(key)
	return v
}
