package broker

import (
	"net/netip"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/snorkel-net/snorkel/controller/api"
	"github.com/snorkel-net/snorkel/controller/kubelocal"
	"github.com/snorkel-net/snorkel/controller/kubelocal/kubetest"
	"github.com/snorkel-net/snorkel/transport"
)

// TestClustersetIPBlocks runs deploy-broker and join against real API
// servers: the broker records the clusterset IP range in Submariner's
// ConfigMap with the default off, join gives each cluster the first free
// /20 or the block asked for and refuses one that is outside the range,
// taken or not IPv4, the broker's default reaches the agent
// configuration, Globalnet refuses clusterset IPs, and leave frees the
// block.
func TestClustersetIPBlocks(t *testing.T) {
	servers := kubetest.Start(t, kubelocal.Options{Name: "broker"}, kubelocal.Options{Name: "c1", ServiceCIDR: "10.88.0.0/16"})
	brokerSrv, c1 := servers[0], servers[1]
	ctx := t.Context()
	ns := api.DefaultBrokerNamespace
	d, err := Deploy(ctx, brokerSrv.Config(), BrokerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	kc, _ := client(t, brokerSrv.Config())
	cm, err := kc.CoreV1().ConfigMaps(ns).Get(ctx, api.ClustersetIPConfigMapName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]string{"clustersetIPEnabled": "false", "clustersetIPCidrRange": `"243.0.0.0/8"`, "clustersetIPClusterSize": "4096"} {
		if cm.Data[k] != want {
			t.Errorf("ConfigMap %s: %s=%q, want %q", cm.Name, k, cm.Data[k], want)
		}
	}
	// Another cluster holds the first /20.
	if _, _, err := recordClustersetIPCIDR(ctx, kc, ns, "other", mustPrefix("243.0.0.0/20")); err != nil {
		t.Fatal(err)
	}
	join := func(o JoinOptions) (*api.AgentConfig, error) {
		o.ClusterID, o.CableDriver = "c1", transport.WireGuard
		o.ClusterCIDRs, o.ServiceCIDRs = []string{"10.8.0.0/16"}, []string{"10.88.0.0/16"}
		return Join(ctx, c1.Config(), d.Info, o)
	}
	for _, tc := range []struct {
		name, cidr string
		want       []string
	}{
		{"outside the range", "10.0.0.0/20", []string{"--clusterset-ip-cidr 10.0.0.0/20", "outside the broker's clusterset IP range 243.0.0.0/8"}},
		{"overlapping another cluster's", "243.0.8.0/21", []string{"--clusterset-ip-cidr 243.0.8.0/21", `overlaps 243.0.0.0/20 of cluster "other"`}},
		{"not IPv4", "fd00::/64", []string{"--clusterset-ip-cidr", "not an IPv4 CIDR"}},
		{"host bits", "243.0.16.1/20", []string{"--clusterset-ip-cidr 243.0.16.1/20", "243.0.16.0/20"}},
	} {
		t.Run("join refuses a block "+tc.name, func(t *testing.T) {
			_, err := join(JoinOptions{ClustersetIPCIDR: tc.cidr})
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%q lacks %q", err, w)
				}
			}
		})
	}

	ac, err := join(JoinOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ac.ClustersetIPCIDR != "243.0.16.0/20" || ac.ClustersetIPCIDRRange != "243.0.0.0/8" || ac.ClustersetIPEnabled {
		t.Errorf("join: block %q range %q default %v; want the first free /20 243.0.16.0/20 of 243.0.0.0/8, default off",
			ac.ClustersetIPCIDR, ac.ClustersetIPCIDRRange, ac.ClustersetIPEnabled)
	}
	mkc, _ := client(t, c1.Config())
	loaded, err := api.LoadAgentConfig(ctx, mkc, api.AgentNamespace)
	if err != nil || loaded.ClustersetIPCIDR != ac.ClustersetIPCIDR || loaded.ClustersetIPCIDRRange != ac.ClustersetIPCIDRRange {
		t.Errorf("the agent Secret holds %+v (%v), want the block join printed", loaded, err)
	}

	if _, err := Deploy(ctx, brokerSrv.Config(), BrokerOptions{ClustersetIPCIDRRange: "244.0.0.0/8"}); err == nil ||
		!strings.Contains(err.Error(), "--clusterset-ip-cidr-range 244.0.0.0/8") || !strings.Contains(err.Error(), "c1") {
		t.Errorf("moving the range under held blocks: %v, want a refusal naming the flag and the clusters", err)
	}
	if _, err := Deploy(ctx, brokerSrv.Config(), BrokerOptions{ClustersetIP: true}); err != nil {
		t.Fatalf("turning the default on: %v", err)
	}
	if ac, err = join(JoinOptions{}); err != nil || ac.ClustersetIPCIDR != "243.0.16.0/20" || !ac.ClustersetIPEnabled {
		t.Errorf("joining again after the broker's default went on: %+v, %v; want the same block, default on", ac, err)
	}

	if _, err := Deploy(ctx, brokerSrv.Config(), BrokerOptions{Namespace: "gn", Globalnet: true, ClustersetIP: true}); err == nil ||
		!strings.Contains(err.Error(), "--enable-clusterset-ip") || !strings.Contains(err.Error(), "Globalnet") {
		t.Errorf("deploy-broker --globalnet --enable-clusterset-ip: %v, want a refusal", err)
	}
	gn, err := Deploy(ctx, brokerSrv.Config(), BrokerOptions{Namespace: "gn", Globalnet: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Join(ctx, c1.Config(), gn.Info, JoinOptions{ClusterID: "c1", EnableClustersetIP: true,
		ClusterCIDRs: []string{"10.8.0.0/16"}, ServiceCIDRs: []string{"10.88.0.0/16"}}); err == nil ||
		!strings.Contains(err.Error(), "--enable-clusterset-ip") || !strings.Contains(err.Error(), "not supported with Globalnet") {
		t.Errorf("join --enable-clusterset-ip under Globalnet: %v, want a refusal", err)
	}

	if err := Leave(ctx, d.Info.RESTConfig(), ns, "c1"); err != nil {
		t.Fatal(err)
	}
	c, _, err := readClustersetIP(ctx, kc, ns)
	if err != nil {
		t.Fatal(err)
	}
	if _, held := c.lookup("c1"); held {
		t.Error("c1 still holds its clusterset IP CIDR after leaving")
	}
	if _, held := c.lookup("other"); !held {
		t.Error("c1's leave freed another cluster's block")
	}
}

func mustPrefix(s string) netip.Prefix { return netip.MustParsePrefix(s) }
