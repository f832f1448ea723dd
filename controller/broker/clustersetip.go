package broker

import (
	"context"
	"encoding/json"
	"fmt"
	"math/bits"
	"net/netip"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"github.com/snorkel-net/snorkel/controller/api"
	"github.com/snorkel-net/snorkel/deploy"
)

// Clusterset IP defaults, as Submariner's: the range, and the addresses
// of each cluster's block (a /20).
const (
	DefaultClustersetIPCIDRRange   = "243.0.0.0/8"
	DefaultClustersetIPClusterSize = 4096
)

// clustersetIPInfo is the content of the clusterset IP ConfigMap.
type clustersetIPInfo struct {
	// Enabled is the clusterset's default for exported services.
	Enabled bool
	Range   netip.Prefix
	// ClusterSize is the addresses of a block join allocates.
	ClusterSize uint64
	// Clusters keeps the ConfigMap's order, in the Globalnet ConfigMap's
	// format.
	Clusters []clusterGlobalCIDRs
}

func (c *clustersetIPInfo) lookup(clusterID string) (netip.Prefix, bool) {
	g := globalnetInfo{Clusters: c.Clusters}
	return g.lookup(clusterID)
}

// taken returns the blocks of every cluster but except.
func (c *clustersetIPInfo) taken(except string) (map[netip.Prefix]string, error) {
	out := map[netip.Prefix]string{}
	for _, e := range c.Clusters {
		if e.ClusterID == except {
			continue
		}
		for _, s := range e.CIDRs {
			p, err := netip.ParsePrefix(s)
			if err != nil {
				return nil, fmt.Errorf("ConfigMap %s: cluster %q has clusterset IP CIDR %q: %w; correct or remove that entry", api.ClustersetIPConfigMapName, e.ClusterID, s, err)
			}
			out[p.Masked()] = e.ClusterID
		}
	}
	return out, nil
}

// validateClustersetIPRange checks deploy-broker's --clusterset-ip-cidr-range.
func validateClustersetIPRange(cidrRange string) (netip.Prefix, error) {
	p, err := netip.ParsePrefix(strings.TrimSpace(cidrRange))
	if err != nil || !p.Addr().Is4() {
		return p, fmt.Errorf("--clusterset-ip-cidr-range %q is not an IPv4 CIDR; give one such as %s", cidrRange, DefaultClustersetIPCIDRRange)
	}
	if p != p.Masked() {
		return p, fmt.Errorf("--clusterset-ip-cidr-range %q is not a network address; did you mean %s?", cidrRange, p.Masked())
	}
	if err := checkGlobalRange(p); err != nil {
		return p, fmt.Errorf("--clusterset-ip-cidr-range %s: %s", p, strings.Replace(err.Error(), DefaultGlobalnetCIDRRange, DefaultClustersetIPCIDRRange, 1))
	}
	if p.Bits() > 32-bits.TrailingZeros64(DefaultClustersetIPClusterSize)-1 {
		return p, fmt.Errorf("--clusterset-ip-cidr-range %s is too small: it must hold at least two clusters' blocks of %d addresses, a /%d or larger", p, DefaultClustersetIPClusterSize, 32-bits.TrailingZeros64(DefaultClustersetIPClusterSize)-1)
	}
	return p, nil
}

// newClustersetIPConfigMap is the ConfigMap deploy-broker creates, in
// Submariner's format: the range is a JSON string, the size a decimal. The
// range is there even with the default off.
func newClustersetIPConfigMap(ns string, enabled bool, cidrRange netip.Prefix) *corev1.ConfigMap {
	r, _ := json.Marshal(cidrRange.String())
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{
			Name:      api.ClustersetIPConfigMapName,
			Namespace: ns,
			Labels:    map[string]string{"component": "submariner-clustersetip"},
		},
		Data: map[string]string{
			api.ClustersetIPEnabledKey:     strconv.FormatBool(enabled),
			api.ClustersetIPCIDRRangeKey:   string(r),
			api.ClustersetIPClusterSizeKey: strconv.Itoa(DefaultClustersetIPClusterSize),
		},
	}
}

// parseClustersetIPConfigMap reads the ConfigMap, accepting the range with
// or without JSON quotes, and a size of 0 (subctl writes it) as the
// default.
func parseClustersetIPConfigMap(cm *corev1.ConfigMap) (*clustersetIPInfo, error) {
	c := &clustersetIPInfo{ClusterSize: DefaultClustersetIPClusterSize}
	where := func(key string) string {
		return fmt.Sprintf("ConfigMap %s/%s key %s", cm.Namespace, cm.Name, key)
	}
	if v := strings.TrimSpace(cm.Data[api.ClustersetIPEnabledKey]); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return nil, fmt.Errorf("%s: %q is not true or false; run `snorkel deploy-broker` again", where(api.ClustersetIPEnabledKey), v)
		}
		c.Enabled = b
	}
	r := strings.TrimSpace(cm.Data[api.ClustersetIPCIDRRangeKey])
	if unq, err := strconv.Unquote(r); err == nil {
		r = unq
	}
	p, err := netip.ParsePrefix(r)
	if err != nil || !p.Addr().Is4() {
		return nil, fmt.Errorf("%s: %q is not an IPv4 CIDR; run `snorkel deploy-broker` again", where(api.ClustersetIPCIDRRangeKey), r)
	}
	c.Range = p.Masked()
	if v := strings.TrimSpace(cm.Data[api.ClustersetIPClusterSizeKey]); v != "" {
		size, err := strconv.ParseUint(v, 10, 64)
		if err != nil || size&(size-1) != 0 || size > uint64(1)<<(32-p.Bits()) {
			return nil, fmt.Errorf("%s: %q is not a power of two that fits %s; run `snorkel deploy-broker` again", where(api.ClustersetIPClusterSizeKey), v, p)
		}
		if size != 0 {
			c.ClusterSize = size
		}
	}
	if s := strings.TrimSpace(cm.Data[clusterInfoKey]); s != "" {
		if err := json.Unmarshal([]byte(s), &c.Clusters); err != nil {
			return nil, fmt.Errorf("%s: %w; correct its JSON list of {cluster_id, global_cidr}", where(clusterInfoKey), err)
		}
	}
	return c, nil
}

// ensureClustersetIPConfigMap creates want, or brings the existing
// ConfigMap to its settings: the default may change at any time, the
// range only while no cluster holds a block of it.
func ensureClustersetIPConfigMap(ctx context.Context, kc kubernetes.Interface, want *corev1.ConfigMap) error {
	cms := kc.CoreV1().ConfigMaps(want.Namespace)
	fail := func(err error) error {
		return fmt.Errorf("the clusterset IP ConfigMap %s/%s: %w", want.Namespace, want.Name, err)
	}
	wantInfo, err := parseClustersetIPConfigMap(want)
	if err != nil {
		return err
	}
	return retry.RetryOnConflict(conflictBackoff, func() error {
		have, err := cms.Get(ctx, want.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			_, err = cms.Create(ctx, want, metav1.CreateOptions{FieldManager: deploy.FieldManager})
			if apierrors.IsAlreadyExists(err) {
				return apierrors.NewConflict(corev1.Resource("configmaps"), want.Name, err)
			}
			if err == nil {
				return nil
			}
		}
		if err != nil {
			return fail(err)
		}
		cur, err := parseClustersetIPConfigMap(have)
		if err != nil {
			return err
		}
		if cur.Enabled == wantInfo.Enabled && cur.Range == wantInfo.Range {
			return nil
		}
		if cur.Range != wantInfo.Range && len(cur.Clusters) > 0 {
			ids := make([]string, len(cur.Clusters))
			for i, c := range cur.Clusters {
				ids[i] = c.ClusterID
			}
			return fmt.Errorf("--clusterset-ip-cidr-range %s: the broker's clusterset IP range is %s, and clusters hold blocks of it (%s); deploy it with --clusterset-ip-cidr-range %s, or make those clusters leave first",
				wantInfo.Range, cur.Range, strings.Join(ids, ", "), cur.Range)
		}
		if have.Data == nil {
			have.Data = map[string]string{}
		}
		for _, k := range []string{api.ClustersetIPEnabledKey, api.ClustersetIPCIDRRangeKey, api.ClustersetIPClusterSizeKey} {
			have.Data[k] = want.Data[k]
		}
		_, err = cms.Update(ctx, have, metav1.UpdateOptions{FieldManager: deploy.FieldManager})
		if err != nil && !apierrors.IsConflict(err) {
			return fail(err)
		}
		return err
	})
}

// readClustersetIP reads the broker's clusterset IP settings; nil for a
// broker without the ConfigMap (deployed before clusterset IPs).
func readClustersetIP(ctx context.Context, kc kubernetes.Interface, ns string) (*clustersetIPInfo, *corev1.ConfigMap, error) {
	cm, err := kc.CoreV1().ConfigMaps(ns).Get(ctx, api.ClustersetIPConfigMapName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("reading the broker's clusterset IP ConfigMap %s/%s: %w", ns, api.ClustersetIPConfigMapName, err)
	}
	c, err := parseClustersetIPConfigMap(cm)
	return c, cm, err
}

// checkRequestedClustersetIPCIDR checks join's --clusterset-ip-cidr against
// the broker's range and the other clusters' blocks.
func checkRequestedClustersetIPCIDR(c *clustersetIPInfo, clusterID string, want netip.Prefix) error {
	if want != want.Masked() {
		return fmt.Errorf("--clusterset-ip-cidr %s is not a network address; did you mean %s?", want, want.Masked())
	}
	if !c.Range.Contains(want.Addr()) || want.Bits() < c.Range.Bits() {
		return fmt.Errorf("--clusterset-ip-cidr %s lies outside the broker's clusterset IP range %s; give a block inside it, such as a /%d, or leave the flag out to get the first free one",
			want, c.Range, 32-bits.TrailingZeros64(c.ClusterSize))
	}
	if want.Bits() > 30 {
		return fmt.Errorf("--clusterset-ip-cidr %s is too small: the gateway takes its first address, and services need the others; give a /30 or larger", want)
	}
	if have, held := c.lookup(clusterID); held && have != want {
		return fmt.Errorf("--clusterset-ip-cidr %s: cluster %q already holds clusterset IP CIDR %s; leave the flag out to keep it, or make the cluster leave the clusterset first", want, clusterID, have)
	}
	taken, err := c.taken(clusterID)
	if err != nil {
		return err
	}
	for p, other := range taken {
		if p.Overlaps(want) {
			return fmt.Errorf("--clusterset-ip-cidr %s overlaps %s of cluster %q; give a free /%d of %s, or leave the flag out to get the first free one", want, p, other, want.Bits(), c.Range)
		}
	}
	return nil
}

// recordClustersetIPCIDR gives clusterID its clusterset IP CIDR in the
// broker's ConfigMap: the one it holds, else want if valid, else the first
// free block. It returns the block and the broker's settings; the update
// carries the resourceVersion it read and is retried on conflict, so
// concurrent joins never get overlapping blocks.
func recordClustersetIPCIDR(ctx context.Context, kc kubernetes.Interface, ns, clusterID string, want netip.Prefix) (netip.Prefix, *clustersetIPInfo, error) {
	var got netip.Prefix
	var info *clustersetIPInfo
	err := retry.RetryOnConflict(conflictBackoff, func() error {
		c, cm, err := readClustersetIP(ctx, kc, ns)
		if err != nil {
			return err
		}
		if c == nil {
			return fmt.Errorf("the broker has no clusterset IP range (ConfigMap %s/%s): run `snorkel deploy-broker` again to add it", ns, api.ClustersetIPConfigMapName)
		}
		info = c
		if want.IsValid() {
			if err := checkRequestedClustersetIPCIDR(c, clusterID, want); err != nil {
				return err
			}
		}
		if have, ok := c.lookup(clusterID); ok {
			got = have
			return nil
		}
		if want.IsValid() {
			got = want
		} else {
			taken, err := c.taken(clusterID)
			if err != nil {
				return err
			}
			var ok bool
			if got, ok = firstFreeBlock(c.Range, c.ClusterSize, taken); !ok {
				return fmt.Errorf("the broker's clusterset IP range %s has no free /%d left for cluster %q (%d clusters hold blocks); free one with a leave, or give a smaller block with --clusterset-ip-cidr",
					c.Range, 32-bits.TrailingZeros64(c.ClusterSize), clusterID, len(taken))
			}
		}
		g := globalnetInfo{Clusters: c.Clusters}
		g.set(clusterID, got)
		c.Clusters = g.Clusters
		if err := writeClusters(cm, &g); err != nil {
			return err
		}
		_, err = kc.CoreV1().ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{FieldManager: deploy.FieldManager})
		return err
	})
	return got, info, err
}

// releaseClustersetIPCIDR removes clusterID's entry from the clusterset IP
// ConfigMap.
func releaseClustersetIPCIDR(ctx context.Context, kc kubernetes.Interface, ns, clusterID string) error {
	return retry.RetryOnConflict(conflictBackoff, func() error {
		c, cm, err := readClustersetIP(ctx, kc, ns)
		if err != nil || cm == nil {
			return err
		}
		g := globalnetInfo{Clusters: c.Clusters}
		if !g.remove(clusterID) {
			return nil
		}
		if err := writeClusters(cm, &g); err != nil {
			return err
		}
		_, err = kc.CoreV1().ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{FieldManager: deploy.FieldManager})
		return err
	})
}
