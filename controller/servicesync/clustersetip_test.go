package servicesync

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	mcsv1a1 "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"

	"github.com/snorkel-net/snorkel/controller/api"
)

// TestClustersetIP runs a broker and three members whose Syncers each have
// a block of 243.0.0.0/8 (c1's default on, c2's and c3's off), and checks
// Lighthouse's clusterset IP rules: the first exporter allocates, later
// ones reuse, a differing setting is a conflict, the VIP outlives its
// allocator's export and is freed with the last one, and a restarted
// Syncer takes its VIPs back from the broker.
func TestClustersetIP(t *testing.T) {
	cs := startClusterset(t)
	blocks := map[string]*ClustersetIPConfig{
		"c1": {CIDR: netip.MustParsePrefix("243.0.0.0/20"), Default: true},
		"c2": {CIDR: netip.MustParsePrefix("243.0.16.0/20")},
		"c3": {CIDR: netip.MustParsePrefix("243.0.32.0/20")},
	}
	for _, n := range []string{"c1", "c2", "c3"} {
		cs.runWith(n, nil, blocks[n])
	}
	c1, c2, c3 := cs.members["c1"], cs.members["c2"], cs.members["c3"]
	all := []*member{c1, c2, c3}
	cs.namespace(t, "vip", "c1", "c2", "c3")
	on := map[string]string{api.UseClustersetIPAnnotation: "true"}
	off := map[string]string{api.UseClustersetIPAnnotation: "false"}
	for _, n := range []string{"web", "web2", "web3"} {
		c2.service(t, "vip", n, "", 80)
	}
	c3.service(t, "vip", "web", "", 80)
	c3.service(t, "vip", "web2", "", 80)

	// hasVIP checks m's ServiceImport ns/name: its spec.ips, the VIP
	// allocator and the clusters imported ("" and nothing for no VIP).
	hasVIP := func(m *member, name, vip, by string, clusters ...string) func() string {
		return func() string {
			si := m.serviceImport(t, "vip", name)
			if si == nil {
				return "no ServiceImport"
			}
			var got []string
			for _, c := range si.Status.Clusters {
				got = append(got, c.Cluster)
			}
			switch {
			case vip == "" && len(si.Spec.IPs) > 0:
				return fmt.Sprintf("spec.ips %v, want none", si.Spec.IPs)
			case vip != "" && (len(si.Spec.IPs) != 1 || si.Spec.IPs[0] != vip):
				return fmt.Sprintf("spec.ips %v, want [%s]", si.Spec.IPs, vip)
			case si.Annotations[api.ClustersetIPAllocatedByAnnotation] != by:
				return fmt.Sprintf("%s=%q, want %q", api.ClustersetIPAllocatedByAnnotation, si.Annotations[api.ClustersetIPAllocatedByAnnotation], by)
			case strings.Join(got, ",") != strings.Join(clusters, ","):
				return fmt.Sprintf("clusters %v, want %v", got, clusters)
			}
			return ""
		}
	}
	everywhere := func(t *testing.T, what, name, vip, by string, clusters ...string) {
		t.Helper()
		for _, m := range all {
			eventually(t, settle, m.name+": "+what, hasVIP(m, name, vip, by, clusters...))
		}
	}

	t.Run("TheFirstExporterAllocatesFromItsBlockSkippingTheGatewaysAddress", func(t *testing.T) {
		c2.exportAnnotated(t, "vip", "web", on)
		everywhere(t, "web has c2's first free VIP", "web", "243.0.16.2", "c2", "c2")
		eventually(t, settle, "c2's export", func() string {
			return conditions(t, c2, "vip", "web", "Valid=True/Valid", "Ready=True/Exported", "Conflict=False/NoConflicts")
		})
	})

	t.Run("ALaterExporterReusesTheVIP", func(t *testing.T) {
		c3.exportAnnotated(t, "vip", "web", on)
		everywhere(t, "web keeps c2's VIP with c3 exporting too", "web", "243.0.16.2", "c2", "c2", "c3")
		eventually(t, settle, "c3's export has no conflict", func() string {
			return conditions(t, c3, "vip", "web", "Ready=True/Exported", "Conflict=False/NoConflicts")
		})
	})

	t.Run("TheVIPOutlivesTheExportOfTheClusterThatAllocatedIt", func(t *testing.T) {
		c2.unexport(t, "vip", "web")
		everywhere(t, "web keeps c2's VIP with c3 alone", "web", "243.0.16.2", "c2", "c3")
	})

	t.Run("ARestartedSyncerTakesItsVIPsBackFromTheBroker", func(t *testing.T) {
		cs.stopSyncer("c2")
		cs.runWith("c2", nil, blocks["c2"])
		// Without web's VIP taken back, web2 would get the lowest free
		// address, 243.0.16.2.
		c2.exportAnnotated(t, "vip", "web2", on)
		everywhere(t, "web2 gets the next VIP", "web2", "243.0.16.3", "c2", "c2")
	})

	t.Run("TheVIPIsFreedWhenNoClusterExportsTheService", func(t *testing.T) {
		c3.unexport(t, "vip", "web")
		for _, m := range all {
			eventually(t, settle, m.name+" forgets web", func() string { return nothingImported(t, m, "vip", "web") })
		}
		c2.exportAnnotated(t, "vip", "web3", on)
		everywhere(t, "web3 gets web's freed VIP", "web3", "243.0.16.2", "c2", "c2")
	})

	t.Run("ADifferentSettingIsAConflictAndExportsWithoutAVIP", func(t *testing.T) {
		c3.exportAnnotated(t, "vip", "web2", off)
		eventually(t, settle, "c3's export conflicts", func() string {
			return conditions(t, c3, "vip", "web2", "Ready=True/Exported",
				`Conflict=True/ConflictingClusterSetIPEnablement:"false":"true":"c2"`)
		})
		everywhere(t, "web2 keeps its VIP and imports both clusters", "web2", "243.0.16.3", "c2", "c2", "c3")
		if si := brokerImport3(t, cs, "web2", "c3"); si.Annotations[AnnotationClustersetIP] != "" {
			t.Errorf("c3's conflicting export carries VIP %s", si.Annotations[AnnotationClustersetIP])
		}
	})

	t.Run("TheServiceExportsAnnotationOverridesTheClusterDefault", func(t *testing.T) {
		for _, n := range []string{"dflt", "optout"} {
			c1.service(t, "vip", n, "", 80)
		}
		c2.service(t, "vip", "plain", "", 80)
		c1.export(t, "vip", "dflt")
		c1.exportAnnotated(t, "vip", "optout", off)
		c2.export(t, "vip", "plain")
		everywhere(t, "c1's default gives dflt a VIP of c1's block", "dflt", "243.0.0.2", "c1", "c1")
		everywhere(t, "optout has none", "optout", "", "", "c1")
		everywhere(t, "c2's default gives plain none", "plain", "", "", "c2")
		if si := c2.serviceImport(t, "vip", "plain"); si.Annotations[api.UseClustersetIPAnnotation] != "false" {
			t.Errorf("plain's ServiceImport: %s=%q, want \"false\"", api.UseClustersetIPAnnotation, si.Annotations[api.UseClustersetIPAnnotation])
		}
	})
}

// brokerImport3 is cluster's ServiceImport of vip/name on the broker.
func brokerImport3(t *testing.T, cs *clusterset, name, cluster string) *mcsv1a1.ServiceImport {
	t.Helper()
	si, err := cs.broker.mcs.MulticlusterV1alpha1().ServiceImports(brokerNS).Get(t.Context(), brokerImportName("vip", name, cluster), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return si
}

func TestClustersetIPUnavailableSaysWhy(t *testing.T) {
	se := &mcsv1a1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{api.UseClustersetIPAnnotation: "true"}}}
	tests := []struct {
		name string
		s    *Syncer
		want string
	}{
		{"under Globalnet", &Syncer{gips: newFakeGlobalIPs(), csDefault: true}, "not supported with Globalnet"},
		{"without a block", &Syncer{}, "no clusterset IP CIDR"},
		{"with a block", &Syncer{vips: newVIPPool(netip.MustParsePrefix("243.0.0.0/20"))}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			want, why := tc.s.wantsClustersetIP(se)
			if !want || !strings.Contains(why, tc.want) || (tc.want == "") != (why == "") {
				t.Errorf("wantsClustersetIP = %v, %q; want true and a reason with %q", want, why, tc.want)
			}
		})
	}
}

func TestVIPPool(t *testing.T) {
	p := newVIPPool(netip.MustParsePrefix("243.0.0.0/30"))
	if a, err := p.allocate("ns/a"); err != nil || a != netip.MustParseAddr("243.0.0.2") {
		t.Fatalf("first allocation %v, %v; want 243.0.0.2 (past the network and the gateway's address)", a, err)
	}
	if a, _ := p.allocate("ns/a"); a != netip.MustParseAddr("243.0.0.2") {
		t.Errorf("a service's second allocation %v, want its own 243.0.0.2", a)
	}
	if _, err := p.allocate("ns/b"); err == nil || !strings.Contains(err.Error(), "--clusterset-ip-cidr") {
		t.Errorf("allocation from a full /30 (the broadcast is not given) = %v, want an error naming --clusterset-ip-cidr", err)
	}
	for _, a := range []string{"243.0.0.0", "243.0.0.1", "243.0.0.3", "243.0.1.2"} {
		if p.reserve("ns/c", netip.MustParseAddr(a)) {
			t.Errorf("reserve(%s) succeeded; network, gateway, broadcast and outside addresses are never a VIP", a)
		}
	}
	if p.reserve("ns/c", netip.MustParseAddr("243.0.0.2")) {
		t.Error("reserve took another service's VIP")
	}
	p.release("ns/a")
	if a, err := p.allocate("ns/b"); err != nil || a != netip.MustParseAddr("243.0.0.2") {
		t.Errorf("allocation after release %v, %v; want the freed 243.0.0.2", a, err)
	}
}
