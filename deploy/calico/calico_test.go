package calico

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"

	"github.com/snorkel-net/snorkel/controller/api"
	submv1 "github.com/snorkel-net/snorkel/controller/api/v1"
	"github.com/snorkel-net/snorkel/controller/broker"
	"github.com/snorkel-net/snorkel/controller/kubelocal"
	"github.com/snorkel-net/snorkel/controller/kubelocal/kubetest"
)

func cluster(id string, pods, svcs, global []string) submv1.Cluster {
	return submv1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Name: id},
		Spec:       submv1.ClusterSpec{ClusterID: id, ClusterCIDR: pods, ServiceCIDR: svcs, GlobalCIDR: global},
	}
}

// The Submariner tutorial's clusters: c1 and c2 apart, g1 and g2 with the
// same CIDRs under Globalnet.
var (
	c1 = cluster("c1", []string{"10.8.0.0/16"}, []string{"10.88.0.0/16"}, nil)
	c2 = cluster("c2", []string{"10.9.0.0/16"}, []string{"10.99.0.0/16"}, nil)
	g1 = cluster("g1", []string{"10.7.0.0/16"}, []string{"10.77.0.0/16"}, []string{"242.0.0.0/16"})
	g2 = cluster("g2", []string{"10.7.0.0/16"}, []string{"10.77.0.0/16"}, []string{"242.1.0.0/16"})
)

const c1Pools = `# Calico IPPools for cluster c1: one per remote CIDR, disabled (never allocated)
# and with natOutgoing off, so Calico does not masquerade traffic to the other clusters.
---
# cluster c2, Pod CIDR
apiVersion: projectcalico.org/v3
kind: IPPool
metadata:
  labels:
    submariner.io/ippool: "true"
  name: submariner-c2-10.9.0.0-16
spec:
  cidr: 10.9.0.0/16
  disabled: true
  natOutgoing: false
---
# cluster c2, Service CIDR
apiVersion: projectcalico.org/v3
kind: IPPool
metadata:
  labels:
    submariner.io/ippool: "true"
  name: submariner-c2-10.99.0.0-16
spec:
  cidr: 10.99.0.0/16
  disabled: true
  natOutgoing: false
`

func render(t *testing.T, local string, clusters ...submv1.Cluster) string {
	t.Helper()
	pools, err := Pools(local, clusters)
	if err != nil {
		t.Fatal(err)
	}
	b, err := YAML(local, pools)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestPoolsForTheRemotePodAndServiceCIDRs(t *testing.T) {
	if got := render(t, "c1", c2, c1); got != c1Pools {
		t.Errorf("got\n%s\nwant\n%s", got, c1Pools)
	}
	if got := render(t, "c2", c1, c2); !strings.Contains(got, "cidr: 10.8.0.0/16") || !strings.Contains(got, "cidr: 10.88.0.0/16") || strings.Contains(got, "10.9.") {
		t.Errorf("c2's pools:\n%s", got)
	}
}

func TestPoolsUnderGlobalnetCoverTheGlobalCIDRsOnly(t *testing.T) {
	got := render(t, "g1", g1, g2)
	if !strings.Contains(got, "name: submariner-g2-242.1.0.0-16\n") || !strings.Contains(got, "cidr: 242.1.0.0/16\n") || !strings.Contains(got, "# cluster g2, global CIDR\n") {
		t.Errorf("g1's pools:\n%s", got)
	}
	if strings.Contains(got, "10.7.") || strings.Contains(got, "10.77.") || strings.Contains(got, "242.0.") {
		t.Errorf("g1's pools cover its own or overlapping CIDRs:\n%s", got)
	}
}

func TestPoolsWithNoOtherCluster(t *testing.T) {
	if got := render(t, "c1", c1); !strings.Contains(got, "nothing to add") || strings.Contains(got, "IPPool\n") {
		t.Errorf("got\n%s", got)
	}
}

func TestPoolsIPv6AndDuplicates(t *testing.T) {
	dual := cluster("d2", []string{"10.9.0.0/16", "fd00:9::/64"}, []string{"10.9.0.0/16"}, nil)
	pools, err := Pools("c1", []submv1.Cluster{c1, dual})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range pools {
		names = append(names, p.Metadata.Name)
	}
	if strings.Join(names, " ") != "submariner-d2-10.9.0.0-16 submariner-d2-fd00-9---64" {
		t.Errorf("pools %v, want one per distinct CIDR with valid names", names)
	}
}

func TestPoolsRefuse(t *testing.T) {
	for _, tc := range []struct {
		name     string
		local    string
		clusters []submv1.Cluster
		want     string
	}{
		{"a cluster ID that is no DNS-1123 label", "C_1", []submv1.Cluster{c1, c2}, `--cluster "C_1" is not a cluster ID`},
		{"a cluster not on the broker", "c3", []submv1.Cluster{c1, c2}, `--cluster "c3" is not on the broker (its clusters: c1, c2)`},
		{"an empty broker", "c1", nil, "(its clusters: none)"},
		{"a global CIDR in 169.254.0.0/16", "g1", []submv1.Cluster{g1, cluster("g2", []string{"10.7.0.0/16"}, []string{"10.77.0.0/16"}, []string{"169.254.0.0/16"})},
			"inside 169.254.0.0/16"},
		{"overlapping CIDRs without Globalnet", "c1", []submv1.Cluster{c1, cluster("c2", []string{"10.8.0.0/16"}, []string{"10.99.0.0/16"}, nil)},
			"need Globalnet"},
		{"a CIDR that is none", "c1", []submv1.Cluster{c1, cluster("c2", []string{"10.9.0.0"}, []string{"10.99.0.0/16"}, nil)},
			`Cluster "c2" has cluster_cidr "10.9.0.0", which is not a CIDR`},
	} {
		if _, err := Pools(tc.local, tc.clusters); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
}

// TestRunReadsTheBroker runs the command against a real API server: the
// broker's Clusters read with the broker-info token and with a kubeconfig
// context.
func TestRunReadsTheBroker(t *testing.T) {
	srv := kubetest.Start(t, kubelocal.Options{Name: "broker"})[0]
	ctx := t.Context()
	d, err := broker.Deploy(ctx, srv.Config(), broker.BrokerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	infoPath := filepath.Join(t.TempDir(), broker.InfoFileName)
	if err := d.Info.WriteFile(infoPath); err != nil {
		t.Fatal(err)
	}
	dc, err := dynamic.NewForConfig(srv.Config())
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []submv1.Cluster{c1, c2} {
		u, err := submv1.ToUnstructured(&c, "Cluster")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := dc.Resource(submv1.ClusterResource).Namespace(api.DefaultBrokerNamespace).Create(ctx, u, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, args := range []IPPoolsCommand{
		{Cluster: "c1", BrokerInfo: infoPath},
		{Cluster: "c1", Kubeconfig: srv.Kubeconfig, Context: srv.Name},
	} {
		var out bytes.Buffer
		if err := RunIPPools(args, &out); err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		if out.String() != c1Pools {
			t.Errorf("%v printed\n%s\nwant\n%s", args, out.String(), c1Pools)
		}
	}
	for _, tc := range []struct {
		args IPPoolsCommand
		want string
	}{
		{IPPoolsCommand{Cluster: "c9", BrokerInfo: infoPath}, `"c9" is not on the broker (its clusters: c1, c2)`},
		{IPPoolsCommand{Cluster: "c1"}, "say where the broker is"},
		{IPPoolsCommand{BrokerInfo: infoPath}, "--cluster is required"},
		{IPPoolsCommand{Cluster: "c1", BrokerInfo: infoPath, Context: "x"}, "not both"},
	} {
		if err := RunIPPools(tc.args, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want %q", tc.args, err, tc.want)
		}
	}
}
