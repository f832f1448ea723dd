// Package calico writes the Calico IPPools a member cluster needs so that
// Calico leaves the other clusters' traffic alone. Calico masquerades what
// pods send to addresses outside its IPPools, which would hide the pods'
// addresses from the other clusters; a disabled IPPool with natOutgoing
// off per remote CIDR stops that without Calico ever handing out those
// addresses, as Submariner's documentation for Calico asks.
//
// The pools are named and labelled as Submariner's route agent names those
// it creates (submariner-<cluster>-<cidr>, submariner.io/ippool=true), so
// a cluster moving between the two keeps one set.
package calico

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	submv1 "github.com/snorkel-net/snorkel/controller/api/v1"
)

// PoolLabel marks the IPPools made for remote clusters.
const PoolLabel = "submariner.io/ippool"

// linkLocal is where Calico keeps its own addresses; it refuses IPPools
// there, and Snorkel never gives out global CIDRs from it.
var linkLocal = netip.MustParsePrefix("169.254.0.0/16")

// IPPool is a projectcalico.org/v3 IPPool with the fields these pools set.
type IPPool struct {
	APIVersion string     `json:"apiVersion"`
	Kind       string     `json:"kind"`
	Metadata   PoolMeta   `json:"metadata"`
	Spec       IPPoolSpec `json:"spec"`
	// Cluster and What say which remote CIDR the pool covers, for the
	// comment above it.
	Cluster string `json:"-"`
	What    string `json:"-"`
}

// PoolMeta is an IPPool's name and labels.
type PoolMeta struct {
	Name   string            `json:"name"`
	Labels map[string]string `json:"labels"`
}

// IPPoolSpec is the part of Calico's IPPoolSpec these pools set.
type IPPoolSpec struct {
	CIDR        string `json:"cidr"`
	NATOutgoing bool   `json:"natOutgoing"`
	Disabled    bool   `json:"disabled"`
}

// ValidateClusterID checks the --cluster flag.
func ValidateClusterID(id string) error {
	if errs := validation.IsDNS1123Label(id); len(errs) > 0 {
		return fmt.Errorf("--cluster %q is not a cluster ID: cluster IDs are DNS-1123 labels (lower-case letters, digits and '-', at most 63), as given to `snorkel join --clusterid`", id)
	}
	return nil
}

// Pools returns the IPPools that cluster local needs for every other
// cluster of clusters: each one's global CIDRs if it has any (Globalnet:
// its Pod and Service CIDRs may overlap local's and are never seen), else
// its Pod and Service CIDRs. It refuses a local cluster that is not among
// clusters, a CIDR that is none, one in 169.254.0.0/16, and, without
// Globalnet, a remote CIDR that overlaps local's own.
func Pools(local string, clusters []submv1.Cluster) ([]IPPool, error) {
	if err := ValidateClusterID(local); err != nil {
		return nil, err
	}
	clusters = slices.Clone(clusters)
	slices.SortFunc(clusters, func(a, b submv1.Cluster) int { return strings.Compare(a.Spec.ClusterID, b.Spec.ClusterID) })
	var ids []string
	var self *submv1.Cluster
	for i := range clusters {
		ids = append(ids, clusters[i].Spec.ClusterID)
		if clusters[i].Spec.ClusterID == local {
			self = &clusters[i]
		}
	}
	if self == nil {
		known := "none"
		if len(ids) > 0 {
			known = strings.Join(ids, ", ")
		}
		return nil, fmt.Errorf("--cluster %q is not on the broker (its clusters: %s); check the ID, or join the cluster first", local, known)
	}
	own, err := parseAll(self, "cluster_cidr", self.Spec.ClusterCIDR)
	if err != nil {
		return nil, err
	}
	ownSvc, err := parseAll(self, "service_cidr", self.Spec.ServiceCIDR)
	if err != nil {
		return nil, err
	}
	own = append(own, ownSvc...)
	var pools []IPPool
	seen := map[netip.Prefix]bool{}
	for i := range clusters {
		c := &clusters[i]
		if c.Spec.ClusterID == local {
			continue
		}
		ranges := []struct {
			field, what string
			cidrs       []string
		}{{"global_cidr", "global CIDR", c.Spec.GlobalCIDR}}
		if len(c.Spec.GlobalCIDR) == 0 {
			ranges = []struct {
				field, what string
				cidrs       []string
			}{{"cluster_cidr", "Pod CIDR", c.Spec.ClusterCIDR}, {"service_cidr", "Service CIDR", c.Spec.ServiceCIDR}}
		}
		for _, r := range ranges {
			ps, err := parseAll(c, r.field, r.cidrs)
			if err != nil {
				return nil, err
			}
			for _, p := range ps {
				if p.Overlaps(linkLocal) {
					return nil, fmt.Errorf("cluster %q has %s %s inside %s, which Calico keeps for itself and refuses in an IPPool; give that cluster another range", c.Spec.ClusterID, r.what, p, linkLocal)
				}
				for _, o := range own {
					if !p.Overlaps(o) {
						continue
					}
					fix := "clusters whose CIDRs overlap need Globalnet (snorkel deploy-broker --globalnet)"
					if r.field == "global_cidr" {
						fix = "global CIDRs must lie outside every cluster's Pod and Service CIDRs; deploy the broker with another --globalnet-cidr-range"
					}
					return nil, fmt.Errorf("cluster %q has %s %s, which overlaps %s of cluster %q: %s", c.Spec.ClusterID, r.what, p, o, local, fix)
				}
				if seen[p] {
					continue
				}
				seen[p] = true
				pools = append(pools, IPPool{
					APIVersion: "projectcalico.org/v3",
					Kind:       "IPPool",
					Metadata:   PoolMeta{Name: poolName(c.Spec.ClusterID, p), Labels: map[string]string{PoolLabel: "true"}},
					Spec:       IPPoolSpec{CIDR: p.String(), NATOutgoing: false, Disabled: true},
					Cluster:    c.Spec.ClusterID,
					What:       r.what,
				})
			}
		}
	}
	return pools, nil
}

// parseAll parses the CIDRs of one field of a Cluster.
func parseAll(c *submv1.Cluster, field string, cidrs []string) ([]netip.Prefix, error) {
	out := make([]netip.Prefix, 0, len(cidrs))
	for _, s := range cidrs {
		p, err := netip.ParsePrefix(strings.TrimSpace(s))
		if err != nil {
			return nil, fmt.Errorf("the broker's Cluster %q has %s %q, which is not a CIDR; run `snorkel join` for that cluster again", c.Spec.ClusterID, field, s)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// poolName is Submariner's name for the pool of cidr of a cluster, made a
// valid object name for IPv6 too.
func poolName(cluster string, cidr netip.Prefix) string {
	return "submariner-" + cluster + "-" + strings.NewReplacer("/", "-", ":", "-").Replace(cidr.String())
}

// YAML writes pools as one YAML stream, each pool after a comment naming
// the cluster and range it covers, for `calicoctl apply -f` (or `kubectl
// apply -f` where the Calico API server runs).
func YAML(local string, pools []IPPool) ([]byte, error) {
	var b bytes.Buffer
	fmt.Fprintf(&b, "# Calico IPPools for cluster %s: one per remote CIDR, disabled (never allocated)\n", local)
	fmt.Fprintf(&b, "# and with natOutgoing off, so Calico does not masquerade traffic to the other clusters.\n")
	if len(pools) == 0 {
		fmt.Fprintf(&b, "# No other cluster has joined yet: there is nothing to add.\n")
	}
	for _, p := range pools {
		y, err := yaml.Marshal(p)
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(&b, "---\n# cluster %s, %s\n", p.Cluster, p.What)
		b.Write(y)
	}
	return b.Bytes(), nil
}

// ClustersFromBroker reads the Cluster objects in broker namespace ns.
func ClustersFromBroker(ctx context.Context, cfg *rest.Config, ns string) ([]submv1.Cluster, error) {
	dc, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	list, err := dc.Resource(submv1.ClusterResource).Namespace(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("reading the Clusters in broker namespace %s: %w", ns, err)
	}
	out := make([]submv1.Cluster, 0, len(list.Items))
	for i := range list.Items {
		c, err := submv1.FromUnstructured[submv1.Cluster](&list.Items[i])
		if err != nil {
			return nil, fmt.Errorf("the broker's Cluster %s: %w", list.Items[i].GetName(), err)
		}
		out = append(out, *c)
	}
	return out, nil
}
