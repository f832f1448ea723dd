package broker

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/snorkel-net/snorkel/controller/api"
)

func gInfo(rangeCIDR string, size uint64, held ...string) *globalnetInfo {
	g := &globalnetInfo{Enabled: true, Range: netip.MustParsePrefix(rangeCIDR), ClusterSize: size}
	for i, h := range held {
		g.Clusters = append(g.Clusters, clusterGlobalCIDRs{ClusterID: fmt.Sprintf("held%d", i), CIDRs: []string{h}})
	}
	return g
}

func TestAllocateGlobalCIDRTakesTheFirstFreeAlignedBlock(t *testing.T) {
	for _, tc := range []struct {
		name string
		g    *globalnetInfo
		want string
	}{
		{"empty range", gInfo("242.0.0.0/8", 65536), "242.0.0.0/16"},
		{"after the first", gInfo("242.0.0.0/8", 65536, "242.0.0.0/16"), "242.1.0.0/16"},
		{"fills a hole", gInfo("242.0.0.0/8", 65536, "242.0.0.0/16", "242.2.0.0/16"), "242.1.0.0/16"},
		{"skips a larger block", gInfo("242.0.0.0/8", 65536, "242.0.0.0/14"), "242.4.0.0/16"},
		{"skips an unaligned smaller block", gInfo("242.0.0.0/8", 65536, "242.0.128.0/24"), "242.1.0.0/16"},
		{"ignores blocks outside the range", gInfo("242.0.0.0/8", 65536, "10.0.0.0/8"), "242.0.0.0/16"},
		{"small blocks", gInfo("169.100.0.0/24", 64, "169.100.0.0/26", "169.100.0.128/26"), "169.100.0.64/26"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := allocateGlobalCIDR(tc.g, "new", 0)
			if err != nil || got.String() != tc.want {
				t.Errorf("allocate = %v, %v; want %s", got, err, tc.want)
			}
		})
	}
}

func TestAllocateGlobalCIDRReusesNothingOfItsOwnAndFailsWhenFull(t *testing.T) {
	g := gInfo("242.0.0.0/15", 65536, "242.0.0.0/16", "242.1.0.0/16")
	if _, err := allocateGlobalCIDR(g, "new", 0); err == nil || !strings.Contains(err.Error(), "no free /16") {
		t.Errorf("full range: %v, want an error saying no /16 is free", err)
	}
	// A cluster's own entry does not block it.
	if got, err := allocateGlobalCIDR(g, "held1", 0); err != nil || got.String() != "242.1.0.0/16" {
		t.Errorf("own block: %v %v", got, err)
	}
}

// allocateReference tries every block in order: slow and obviously right.
func allocateReference(g *globalnetInfo, except string) (netip.Prefix, bool) {
	taken, _ := g.taken(except)
	bits := g.clusterBits()
	for a := g.Range.Addr(); g.Range.Contains(a); {
		cand := netip.PrefixFrom(a, bits)
		free := true
		for p := range taken {
			free = free && !p.Overlaps(cand)
		}
		if free {
			return cand, true
		}
		next := uint64(ipv4Uint(a)) + g.ClusterSize
		if next > 0xffffffff {
			break
		}
		a = uint32ToIPv4(uint32(next))
	}
	return netip.Prefix{}, false
}

func TestAllocateGlobalCIDRMatchesTheReferenceOnRandomLayouts(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 2000 {
		size := uint64(1) << (2 + r.IntN(5))
		g := gInfo("242.0.0.0/22", size)
		for j := range r.IntN(12) {
			bits := 20 + r.IntN(12)
			a := uint32ToIPv4(0xf1fffc00 + uint32(r.IntN(1<<12)))
			g.Clusters = append(g.Clusters, clusterGlobalCIDRs{ClusterID: fmt.Sprint("c", j), CIDRs: []string{netip.PrefixFrom(a, bits).Masked().String()}})
		}
		want, ok := allocateReference(g, "new")
		got, err := allocateGlobalCIDR(g, "new", 0)
		if ok != (err == nil) || (ok && got != want) {
			t.Fatalf("layout %d %v size %d: allocate = %v, %v; reference %v, %v", i, g.Clusters, size, got, err, want, ok)
		}
	}
}

func TestCheckRequestedGlobalCIDRNamesTheFlag(t *testing.T) {
	g := gInfo("242.0.0.0/8", 65536, "242.0.0.0/16")
	for _, tc := range []struct {
		cidr, want string
	}{
		{"242.0.0.0/16", "overlaps 242.0.0.0/16 of cluster \"held0\""},
		{"242.0.0.0/8", "overlaps 242.0.0.0/16 of cluster \"held0\""},
		{"242.0.128.0/24", "give a free /24 of 242.0.0.0/8"},
		{"242.0.0.0/7", "outside the broker's Globalnet range 242.0.0.0/8"},
		{"10.1.0.0/16", "outside the broker's Globalnet range 242.0.0.0/8"},
		{"242.5.0.1/16", "not a network address"},
		{"fd00::/64", "IPv4"},
	} {
		err := checkRequestedGlobalCIDR(g, "new", netip.MustParsePrefix(tc.cidr))
		if err == nil || !strings.Contains(err.Error(), "--globalnet-cidr") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error naming --globalnet-cidr with %q", tc.cidr, err, tc.want)
		}
	}
	// Any free block of the range will do, whatever the broker's
	// cluster size, as subctl accepts.
	for _, free := range []string{"242.7.0.0/16", "242.1.0.0/24", "242.2.0.0/15", "242.255.255.255/32"} {
		if err := checkRequestedGlobalCIDR(g, "new", netip.MustParsePrefix(free)); err != nil {
			t.Errorf("a free %s: %v", free, err)
		}
	}
	if err := checkRequestedGlobalCIDR(g, "held0", netip.MustParsePrefix("242.0.0.0/16")); err != nil {
		t.Errorf("a cluster's own block: %v", err)
	}
}

func TestAllocateGlobalCIDRTakesTheAskedSize(t *testing.T) {
	for _, tc := range []struct {
		name string
		g    *globalnetInfo
		size uint64
		want string
	}{
		{"a /24 in an empty range", gInfo("120.0.0.0/8", 65536), 256, "120.0.0.0/24"},
		{"past a /24 another cluster asked for", gInfo("120.0.0.0/8", 65536, "120.1.0.0/24"), 256, "120.0.0.0/24"},
		{"between blocks of other sizes", gInfo("120.0.0.0/8", 65536, "120.0.0.0/24", "120.0.2.0/23"), 512, "120.0.4.0/23"},
		{"the broker's size when not asked", gInfo("120.0.0.0/8", 65536, "120.0.0.0/24"), 0, "120.1.0.0/16"},
	} {
		got, err := allocateGlobalCIDR(tc.g, "new", tc.size)
		if err != nil || got.String() != tc.want {
			t.Errorf("%s: %v, %v; want %s", tc.name, got, err, tc.want)
		}
	}
}

func TestPrecheckGlobalCIDRRoundsTheClusterSizeAsSubctl(t *testing.T) {
	g := gInfo("120.0.0.0/8", 65536)
	for _, tc := range []struct {
		size, want uint64
	}{{1, 1}, {200, 256}, {256, 256}, {257, 512}, {1 << 23, 1 << 23}} {
		if got, err := precheckGlobalCIDR(g, "new", netip.Prefix{}, tc.size); err != nil || got != tc.want {
			t.Errorf("--globalnet-cluster-size %d: %d, %v; want %d", tc.size, got, err, tc.want)
		}
	}
	for _, tc := range []struct {
		g    *globalnetInfo
		size uint64
		want string
	}{
		{g, 1<<23 + 1, "--globalnet-cluster-size 8388609 is too large for 120.0.0.0/8: at most 8388608"},
		{&globalnetInfo{}, 256, "--globalnet-cluster-size 256: the broker has Globalnet off"},
	} {
		if _, err := precheckGlobalCIDR(tc.g, "new", netip.Prefix{}, tc.size); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("--globalnet-cluster-size %d: %v, want %q", tc.size, err, tc.want)
		}
	}
}

func TestJoinOptionsTakeTheGlobalCIDROrTheClusterSize(t *testing.T) {
	_, err := JoinOptions{ClusterID: "c1", GlobalCIDR: "120.1.0.0/24", GlobalnetClusterSize: 256}.parse()
	if err == nil || !strings.Contains(err.Error(), "--globalnet-cidr 120.1.0.0/24 and --globalnet-cluster-size 256: give only one") {
		t.Errorf("both: %v", err)
	}
}

func TestValidateGlobalnetSettingsRoundsUpAndRefusesBadRanges(t *testing.T) {
	p, size, err := validateGlobalnetSettings("242.0.0.0/8", 50000)
	if err != nil || p.String() != "242.0.0.0/8" || size != 65536 {
		t.Errorf("50000 in /8: %v %d %v, want 65536", p, size, err)
	}
	for _, tc := range []struct {
		r    string
		size uint64
		want string
	}{
		{"242.0.0.0/8", 1 << 24, "too large"},
		{"242.0.0.0/8", 0, "at least 1"},
		{"169.254.0.0/16", 256, "link-local"},
		{"127.0.0.0/16", 256, "loopback"},
		{"242.0.0.1/8", 256, "not a network address"},
		{"fd00::/48", 256, "not an IPv4 CIDR"},
	} {
		_, _, err := validateGlobalnetSettings(tc.r, tc.size)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s size %d: %v, want %q", tc.r, tc.size, err, tc.want)
		}
	}
}

func TestGlobalnetConfigMapKeepsSubmarinersFormat(t *testing.T) {
	cm := newGlobalnetConfigMap("ns", true, netip.MustParsePrefix("242.0.0.0/8"), 65536)
	if cm.Data[api.GlobalnetEnabledKey] != "true" || cm.Data[api.GlobalnetCIDRRangeKey] != `"242.0.0.0/8"` || cm.Data[api.GlobalnetClusterSizeKey] != "65536" {
		t.Errorf("data %v, want Submariner's: enabled true, the range JSON-quoted, the size in decimal", cm.Data)
	}
	g, err := parseGlobalnetConfigMap(cm)
	if err != nil {
		t.Fatal(err)
	}
	g.set("c1", netip.MustParsePrefix("242.0.0.0/16"))
	if err := writeClusters(cm, g); err != nil {
		t.Fatal(err)
	}
	want := "[\n\t{\n\t\t\"cluster_id\": \"c1\",\n\t\t\"global_cidr\": [\n\t\t\t\"242.0.0.0/16\"\n\t\t]\n\t}\n]"
	if cm.Data[clusterInfoKey] != want {
		t.Errorf("clusterinfo %q, want %q", cm.Data[clusterInfoKey], want)
	}
	// Written by hand, with the range unquoted.
	hand := &corev1.ConfigMap{Data: map[string]string{
		api.GlobalnetEnabledKey: "true", api.GlobalnetCIDRRangeKey: "242.0.0.0/8", api.GlobalnetClusterSizeKey: "65536",
		clusterInfoKey: `[{"cluster_id":"a","global_cidr":["242.3.0.0/16"]}]`,
	}}
	g, err = parseGlobalnetConfigMap(hand)
	if err != nil || g.Range.String() != "242.0.0.0/8" || len(g.Clusters) != 1 {
		t.Errorf("hand-written: %+v %v", g, err)
	}
	if p, ok := g.lookup("a"); !ok || p.String() != "242.3.0.0/16" {
		t.Errorf("lookup a = %v %v", p, ok)
	}
	off := newGlobalnetConfigMap("ns", false, netip.Prefix{}, 0)
	if len(off.Data) != 1 || off.Data[api.GlobalnetEnabledKey] != "false" {
		t.Errorf("Globalnet off: %v, want only globalnetEnabled=false", off.Data)
	}
	hand.Data[api.GlobalnetClusterSizeKey] = "1000"
	if _, err := parseGlobalnetConfigMap(hand); err == nil || !strings.Contains(err.Error(), api.GlobalnetClusterSizeKey) {
		t.Errorf("size 1000: %v, want an error naming %s", err, api.GlobalnetClusterSizeKey)
	}
}
