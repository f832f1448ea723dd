package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/bits"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"github.com/snorkel-net/snorkel/controller/api"
	"github.com/snorkel-net/snorkel/deploy"
)

// clusterInfoKey is the key of the Globalnet ConfigMap
// (api.GlobalnetConfigMapName) under which the clusters' global CIDRs are
// recorded; only the broker verbs read it.
const clusterInfoKey = "clusterinfo"

// Globalnet defaults, as Submariner's.
const (
	DefaultGlobalnetCIDRRange   = "242.0.0.0/8"
	DefaultGlobalnetClusterSize = 65536
)

// conflictBackoff paces the retries of a read-modify-write of the Globalnet
// ConfigMap that lost a race: enough steps for many members joining at once.
var conflictBackoff = wait.Backoff{Steps: 30, Duration: 10 * time.Millisecond, Factor: 1.5, Jitter: 1, Cap: time.Second}

// globalnetInfo is the content of the Globalnet ConfigMap.
type globalnetInfo struct {
	Enabled     bool
	Range       netip.Prefix
	ClusterSize uint64
	// Clusters keeps the ConfigMap's order.
	Clusters []clusterGlobalCIDRs
}

// clusterGlobalCIDRs is one entry of the "clusterinfo" key.
type clusterGlobalCIDRs struct {
	ClusterID string   `json:"cluster_id"`
	CIDRs     []string `json:"global_cidr"`
}

// clusterBits is the prefix length of a block of ClusterSize addresses.
func (g *globalnetInfo) clusterBits() int { return 32 - bits.TrailingZeros64(g.ClusterSize) }

func (g *globalnetInfo) lookup(clusterID string) (netip.Prefix, bool) {
	for _, c := range g.Clusters {
		if c.ClusterID == clusterID && len(c.CIDRs) > 0 {
			p, err := netip.ParsePrefix(c.CIDRs[0])
			return p, err == nil
		}
	}
	return netip.Prefix{}, false
}

// set records cidr for clusterID, replacing its entry if it has one.
func (g *globalnetInfo) set(clusterID string, cidr netip.Prefix) {
	for i := range g.Clusters {
		if g.Clusters[i].ClusterID == clusterID {
			g.Clusters[i].CIDRs = []string{cidr.String()}
			return
		}
	}
	g.Clusters = append(g.Clusters, clusterGlobalCIDRs{ClusterID: clusterID, CIDRs: []string{cidr.String()}})
}

// remove drops clusterID's entry and reports whether it had one.
func (g *globalnetInfo) remove(clusterID string) bool {
	n := len(g.Clusters)
	g.Clusters = slices.DeleteFunc(g.Clusters, func(c clusterGlobalCIDRs) bool { return c.ClusterID == clusterID })
	return len(g.Clusters) != n
}

// taken returns the global CIDRs of every cluster but except.
func (g *globalnetInfo) taken(except string) (map[netip.Prefix]string, error) {
	out := map[netip.Prefix]string{}
	for _, c := range g.Clusters {
		if c.ClusterID == except {
			continue
		}
		for _, s := range c.CIDRs {
			p, err := netip.ParsePrefix(s)
			if err != nil {
				return nil, fmt.Errorf("ConfigMap %s: cluster %q has global CIDR %q: %w; correct or remove that entry", api.GlobalnetConfigMapName, c.ClusterID, s, err)
			}
			out[p.Masked()] = c.ClusterID
		}
	}
	return out, nil
}

// validateGlobalnetSettings checks a Globalnet range and cluster size and
// returns the size rounded up to a power of two, as Submariner does.
func validateGlobalnetSettings(cidrRange string, clusterSize uint64) (netip.Prefix, uint64, error) {
	p, err := netip.ParsePrefix(cidrRange)
	if err != nil || !p.Addr().Is4() {
		return p, 0, fmt.Errorf("--globalnet-cidr-range %q is not an IPv4 CIDR; give one such as %s", cidrRange, DefaultGlobalnetCIDRRange)
	}
	if p != p.Masked() {
		return p, 0, fmt.Errorf("--globalnet-cidr-range %q is not a network address; did you mean %s?", cidrRange, p.Masked())
	}
	if err := checkGlobalRange(p); err != nil {
		return p, 0, fmt.Errorf("--globalnet-cidr-range %s: %w", p, err)
	}
	size, err := roundClusterSize("--default-globalnet-cluster-size", p, clusterSize)
	return p, size, err
}

// roundClusterSize rounds the number of global IPs a cluster gets up to a
// power of two, and refuses a size that leaves no room in r for a second
// cluster, as Submariner does; flag names the number in errors.
func roundClusterSize(flag string, r netip.Prefix, clusterSize uint64) (uint64, error) {
	if clusterSize == 0 {
		return 0, fmt.Errorf("%s must be at least 1: it is the number of global IPs each cluster gets", flag)
	}
	size := uint64(1) << (64 - bits.LeadingZeros64(clusterSize-1))
	avail := uint64(1) << (32 - r.Bits())
	if size > avail/2 {
		return 0, fmt.Errorf("%s %d is too large for %s: at most %d, so that at least two clusters fit", flag, clusterSize, r, avail/2)
	}
	return size, nil
}

// checkGlobalRange refuses ranges global IPs must never come from.
func checkGlobalRange(p netip.Prefix) error {
	for _, bad := range []struct {
		p    netip.Prefix
		what string
	}{
		{netip.MustParsePrefix("0.0.0.0/8"), "the unspecified range"},
		{netip.MustParsePrefix("127.0.0.0/8"), "the loopback range"},
		{netip.MustParsePrefix("169.254.0.0/16"), "the link-local range (Calico uses it)"},
		{netip.MustParsePrefix("224.0.0.0/4"), "the multicast range"},
	} {
		if p.Overlaps(bad.p) {
			return fmt.Errorf("overlaps %s %s; choose another range, e.g. %s", bad.what, bad.p, DefaultGlobalnetCIDRRange)
		}
	}
	return nil
}

// newGlobalnetConfigMap is the ConfigMap deploy-broker creates, in
// Submariner's format: the range is a JSON string, the size a decimal.
func newGlobalnetConfigMap(ns string, enabled bool, cidrRange netip.Prefix, size uint64) *corev1.ConfigMap {
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{
			Name:      api.GlobalnetConfigMapName,
			Namespace: ns,
			Labels:    map[string]string{"component": "submariner-globalnet"},
		},
		Data: map[string]string{api.GlobalnetEnabledKey: "false"},
	}
	if enabled {
		r, _ := json.Marshal(cidrRange.String())
		cm.Data[api.GlobalnetEnabledKey] = "true"
		cm.Data[api.GlobalnetCIDRRangeKey] = string(r)
		cm.Data[api.GlobalnetClusterSizeKey] = strconv.FormatUint(size, 10)
	}
	return cm
}

// parseGlobalnetConfigMap reads the ConfigMap, accepting the range with or
// without JSON quotes.
func parseGlobalnetConfigMap(cm *corev1.ConfigMap) (*globalnetInfo, error) {
	g := &globalnetInfo{}
	where := func(key string) string {
		return fmt.Sprintf("ConfigMap %s/%s key %s", cm.Namespace, cm.Name, key)
	}
	if v := strings.TrimSpace(cm.Data[api.GlobalnetEnabledKey]); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return nil, fmt.Errorf("%s: %q is not true or false; run `snorkel deploy-broker` again", where(api.GlobalnetEnabledKey), v)
		}
		g.Enabled = b
	}
	if s := strings.TrimSpace(cm.Data[clusterInfoKey]); s != "" {
		if err := json.Unmarshal([]byte(s), &g.Clusters); err != nil {
			return nil, fmt.Errorf("%s: %w; correct its JSON list of {cluster_id, global_cidr}", where(clusterInfoKey), err)
		}
	}
	if !g.Enabled {
		return g, nil
	}
	r := strings.TrimSpace(cm.Data[api.GlobalnetCIDRRangeKey])
	if unq, err := strconv.Unquote(r); err == nil {
		r = unq
	}
	p, err := netip.ParsePrefix(r)
	if err != nil || !p.Addr().Is4() {
		return nil, fmt.Errorf("%s: %q is not an IPv4 CIDR; run `snorkel deploy-broker` again", where(api.GlobalnetCIDRRangeKey), r)
	}
	g.Range = p.Masked()
	size, err := strconv.ParseUint(strings.TrimSpace(cm.Data[api.GlobalnetClusterSizeKey]), 10, 64)
	if err != nil || size == 0 || size&(size-1) != 0 || size > uint64(1)<<(32-p.Bits()) {
		return nil, fmt.Errorf("%s: %q is not a power of two that fits %s; run `snorkel deploy-broker` again", where(api.GlobalnetClusterSizeKey), cm.Data[api.GlobalnetClusterSizeKey], p)
	}
	g.ClusterSize = size
	return g, nil
}

// writeClusters stores g.Clusters in cm, indented as Submariner writes it.
func writeClusters(cm *corev1.ConfigMap, g *globalnetInfo) error {
	list := g.Clusters
	if list == nil {
		list = []clusterGlobalCIDRs{}
	}
	b, err := json.MarshalIndent(list, "", "\t")
	if err != nil {
		return err
	}
	if cm.Data == nil {
		cm.Data = map[string]string{}
	}
	cm.Data[clusterInfoKey] = string(b)
	return nil
}

// checkRequestedGlobalCIDR checks a --globalnet-cidr against the broker's
// range and the other clusters' CIDRs. Any block of the range that
// overlaps no other cluster's will do, whatever its size, as subctl
// accepts: the broker's cluster size is only the default.
func checkRequestedGlobalCIDR(g *globalnetInfo, clusterID string, want netip.Prefix) error {
	if !want.Addr().Is4() {
		return fmt.Errorf("--globalnet-cidr %s: Globalnet is IPv4; give a block of %s", want, g.Range)
	}
	if want != want.Masked() {
		return fmt.Errorf("--globalnet-cidr %s is not a network address; did you mean %s?", want, want.Masked())
	}
	if !g.Range.Contains(want.Addr()) || want.Bits() < g.Range.Bits() {
		return fmt.Errorf("--globalnet-cidr %s lies outside the broker's Globalnet range %s; give a block inside it, such as a /%d, or leave the flag out to get the first free one", want, g.Range, g.clusterBits())
	}
	taken, err := g.taken(clusterID)
	if err != nil {
		return err
	}
	for p, other := range taken {
		if p.Overlaps(want) {
			return fmt.Errorf("--globalnet-cidr %s overlaps %s of cluster %q; give a free /%d of %s, or leave the flag out to get the first free one", want, p, other, want.Bits(), g.Range)
		}
	}
	return nil
}

// allocateGlobalCIDR returns the first block of size addresses (a power of
// two; g.ClusterSize if 0) in g.Range that overlaps no other cluster's
// global CIDR.
func allocateGlobalCIDR(g *globalnetInfo, clusterID string, size uint64) (netip.Prefix, error) {
	if size == 0 {
		size = g.ClusterSize
	}
	prefixBits := 32 - bits.TrailingZeros64(size)
	taken, err := g.taken(clusterID)
	if err != nil {
		return netip.Prefix{}, err
	}
	if p, ok := firstFreeBlock(g.Range, size, taken); ok {
		return p, nil
	}
	return netip.Prefix{}, fmt.Errorf("the broker's Globalnet range %s has no free /%d left for cluster %q (%d clusters hold blocks); free one with a leave, ask for fewer global IPs with --globalnet-cluster-size, or deploy the broker with a larger --globalnet-cidr-range", g.Range, prefixBits, clusterID, len(taken))
}

// firstFreeBlock returns the first aligned block of size addresses (a
// power of two) in r that overlaps none of taken.
func firstFreeBlock(r netip.Prefix, size uint64, taken map[netip.Prefix]string) (netip.Prefix, bool) {
	prefixBits := 32 - bits.TrailingZeros64(size)
	type span struct{ lo, hi uint64 } // [lo, hi)
	var used []span
	for p := range taken {
		if p.Addr().Is4() {
			lo := uint64(ipv4Uint(p.Addr()))
			used = append(used, span{lo, lo + uint64(1)<<(32-p.Bits())})
		}
	}
	base := uint64(ipv4Uint(r.Addr()))
	end := base + uint64(1)<<(32-r.Bits())
	for cand := base; cand+size <= end; {
		next := cand
		for _, u := range used {
			if u.lo < cand+size && cand < u.hi {
				// Resume at the first aligned block past this one.
				next = max(next, base+(u.hi-base+size-1)/size*size)
			}
		}
		if next == cand {
			return netip.PrefixFrom(uint32ToIPv4(uint32(cand)), prefixBits), true
		}
		cand = next
	}
	return netip.Prefix{}, false
}

func ipv4Uint(a netip.Addr) uint32 {
	b := a.As4()
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}

func uint32ToIPv4(v uint32) netip.Addr {
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

// errGlobalnetOff is returned by recordGlobalCIDR when the broker has
// Globalnet off.
var errGlobalnetOff = errors.New("globalnet off")

// readGlobalnet reads the broker's Globalnet settings; a broker without the
// ConfigMap has Globalnet off.
func readGlobalnet(ctx context.Context, kc kubernetes.Interface, ns string) (*globalnetInfo, *corev1.ConfigMap, error) {
	cm, err := kc.CoreV1().ConfigMaps(ns).Get(ctx, api.GlobalnetConfigMapName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return &globalnetInfo{}, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("reading the broker's Globalnet ConfigMap %s/%s: %w", ns, api.GlobalnetConfigMapName, err)
	}
	g, err := parseGlobalnetConfigMap(cm)
	return g, cm, err
}

// recordGlobalCIDR gives clusterID its global CIDR in the broker's
// Globalnet ConfigMap: the one it already holds, else want if valid, else
// the first free block of size addresses (the broker's cluster size if 0).
// The update carries the resourceVersion it read and is retried on
// conflict, so concurrent joins never get overlapping blocks.
func recordGlobalCIDR(ctx context.Context, kc kubernetes.Interface, ns, clusterID string, want netip.Prefix, size uint64) (netip.Prefix, error) {
	var got netip.Prefix
	err := retry.RetryOnConflict(conflictBackoff, func() error {
		g, cm, err := readGlobalnet(ctx, kc, ns)
		if err != nil {
			return err
		}
		if !g.Enabled {
			return errGlobalnetOff
		}
		rounded, err := precheckGlobalCIDR(g, clusterID, want, size)
		if err != nil {
			return err
		}
		if have, ok := g.lookup(clusterID); ok {
			got = have
			return nil
		}
		if want.IsValid() {
			got = want
		} else if got, err = allocateGlobalCIDR(g, clusterID, rounded); err != nil {
			return err
		}
		g.set(clusterID, got)
		if err := writeClusters(cm, g); err != nil {
			return err
		}
		_, err = kc.CoreV1().ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{FieldManager: deploy.FieldManager})
		return err
	})
	return got, err
}

// releaseGlobalCIDR removes clusterID's entry from the Globalnet ConfigMap.
func releaseGlobalCIDR(ctx context.Context, kc kubernetes.Interface, ns, clusterID string) error {
	return retry.RetryOnConflict(conflictBackoff, func() error {
		g, cm, err := readGlobalnet(ctx, kc, ns)
		if err != nil || cm == nil || !g.remove(clusterID) {
			return err
		}
		if err := writeClusters(cm, g); err != nil {
			return err
		}
		_, err = kc.CoreV1().ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{FieldManager: deploy.FieldManager})
		return err
	})
}
