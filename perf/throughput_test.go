package perf

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/snorkel-net/snorkel/perf/lab"
)

func TestGlobalnetAddsASystemAfterEachTransport(t *testing.T) {
	o := ThroughputOptions{Transports: []string{"wireguard", "vxlan"}, Globalnet: true, Baselines: BaselineNames, OutDir: "x"}
	o.applyDefaults()
	if err := o.validate(); err != nil {
		t.Fatalf("validate refused good options: %v", err)
	}
	var names, tags []string
	for _, s := range o.setups() {
		names, tags = append(names, s.Name), append(tags, s.Tag)
	}
	wantNames := []string{"snorkel-wireguard", "snorkel-wireguard-globalnet", "snorkel-vxlan", "snorkel-vxlan-globalnet", "wireguard-go", "kernel"}
	if !slices.Equal(names, wantNames) {
		t.Errorf("setups %v, want %v", names, wantNames)
	}
	if want := []string{"sw", "gw", "sv", "gv", "wg", "k"}; !slices.Equal(tags, want) {
		t.Errorf("tags %v, want %v", tags, want)
	}
}

// TestTagsFitTheLongestPrefix resolves both scenarios with the longest
// prefix validate allows and every system's tag, which NewPlan refuses when
// a namespace or interface name would not fit.
func TestTagsFitTheLongestPrefix(t *testing.T) {
	o := ThroughputOptions{Transports: []string{"wireguard", "vxlan"}, Globalnet: true, Baselines: BaselineNames, OutDir: "x", Prefix: "abcdefghi"}
	o.applyDefaults()
	if err := o.validate(); err != nil {
		t.Fatalf("validate refused a 9-character prefix: %v", err)
	}
	seen := map[string]string{}
	for _, s := range o.setups() {
		if len(s.Tag) > 3 {
			t.Errorf("%s: tag %q is longer than 3 characters", s.Name, s.Tag)
		}
		if prev, dup := seen[s.Tag]; dup {
			t.Errorf("%s and %s share tag %q", prev, s.Name, s.Tag)
		}
		seen[s.Tag] = s.Name
		for _, sc := range []lab.Scenario{lab.Basic(), lab.Globalnet()} {
			if _, err := lab.NewPlan(sc, o.Prefix+s.Tag+"-"); err != nil {
				t.Errorf("%s in scenario %s: %v", s.Name, sc.Name, err)
			}
		}
	}
}

func TestGlobalnetWithoutATransportIsRefused(t *testing.T) {
	o := ThroughputOptions{Globalnet: true, Baselines: []string{BaselineKernel}, OutDir: "x"}
	o.applyDefaults()
	err := o.validate()
	if err == nil {
		t.Fatal("validate accepted globalnet with transport none")
	}
	for _, want := range []string{"globalnet:", "give a transport", "drop globalnet"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q: %v", want, err)
		}
	}
}

func TestServerPodIsReachedAtItsGlobalIPWithGlobalnet(t *testing.T) {
	for _, tc := range []struct {
		name     string
		scenario lab.Scenario
		pod      string
		global   bool
	}{
		{"basic: the first pod at its pod IP", lab.Basic(), "c2-web-1", false},
		{"globalnet: the first headless pod at its global IP", lab.Globalnet(), "g2-db-0", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := lab.NewPlan(tc.scenario, "sgt-")
			if err != nil {
				t.Fatal(err)
			}
			c := &p.Clusters[1]
			pod, addr, err := serverPod(c)
			if err != nil {
				t.Fatal(err)
			}
			if pod.Name != tc.pod {
				t.Errorf("server pod %s, want %s", pod.Name, tc.pod)
			}
			switch {
			case tc.global && (addr != pod.GlobalIP || !c.Spec.GlobalCIDR.Contains(addr)):
				t.Errorf("address %s, want %s's global IP %s in %s", addr, pod.Name, pod.GlobalIP, c.Spec.GlobalCIDR)
			case !tc.global && addr != pod.IP:
				t.Errorf("address %s, want the pod IP %s", addr, pod.IP)
			}
		})
	}
}

func TestServerPodNeedsAGlobalIPWithGlobalnet(t *testing.T) {
	sc := lab.Globalnet()
	sc.Clusters[1].Services = sc.Clusters[1].Services[:1]
	p, err := lab.NewPlan(sc, "sgt-")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := serverPod(&p.Clusters[1]); err == nil || !strings.Contains(err.Error(), "headless") {
		t.Errorf("serverPod without headless pods: %v, want an error saying to add a headless service", err)
	}
}

func TestGlobalnetSystemsAreComparedWithTheirTransportWithout(t *testing.T) {
	systems := []SystemInfo{
		{Name: "snorkel-wireguard", Kind: KindSnorkel, Transport: "wireguard"},
		{Name: "snorkel-wireguard-globalnet", Kind: KindSnorkel, Transport: "wireguard", Globalnet: true},
		{Name: "snorkel-vxlan", Kind: KindSnorkel, Transport: "vxlan"},
		{Name: "snorkel-vxlan-globalnet", Kind: KindSnorkel, Transport: "vxlan", Globalnet: true},
		{Name: "wireguard-go", Kind: KindBaseline, Transport: "wireguard"},
		{Name: "kernel", Kind: KindBaseline},
	}
	var got []string
	for _, c := range comparisons(systems) {
		if c.Metric != MetricThroughput.Name {
			t.Errorf("%s / %s compares %s, want throughput", c.System, c.Baseline, c.Metric)
		}
		got = append(got, fmt.Sprintf("%s/%s %g", c.System, c.Baseline, c.Target))
	}
	want := []string{
		"snorkel-wireguard/wireguard-go 0.9",
		"snorkel-wireguard/kernel 0",
		"snorkel-wireguard-globalnet/snorkel-wireguard 0.95",
		"snorkel-vxlan/wireguard-go 0",
		"snorkel-vxlan/kernel 0",
		"snorkel-vxlan-globalnet/snorkel-vxlan 0.95",
	}
	if !slices.Equal(got, want) {
		t.Errorf("comparisons\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestReportsShowTheGlobalnetComparison(t *testing.T) {
	r := &Results{
		Benchmark: "throughput",
		Metrics:   []Metric{MetricThroughput},
		Systems: []SystemInfo{
			{Name: "snorkel-wireguard", Kind: KindSnorkel, Transport: "wireguard"},
			{Name: "snorkel-wireguard-globalnet", Kind: KindSnorkel, Transport: "wireguard", Globalnet: true},
		},
		Runs: []Measurement{
			{System: "snorkel-wireguard", Rep: 1, Order: 1, Values: map[string]float64{MetricThroughput.Name: 2.0e9}},
			{System: "snorkel-wireguard-globalnet", Rep: 1, Order: 2, Values: map[string]float64{MetricThroughput.Name: 1.96e9}},
		},
	}
	r.summarize()
	for _, c := range comparisons(r.Systems) {
		r.compare(c.Metric, c.System, c.Baseline, c.Target)
	}
	want := "snorkel-wireguard-globalnet / snorkel-wireguard (median throughput): 0.98× (target ≥ 0.95×: met)"
	var term strings.Builder
	if err := r.WriteTable(&term); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(term.String(), want) {
		t.Errorf("terminal table lacks %q:\n%s", want, term.String())
	}
	dir := t.TempDir()
	if err := r.WriteMarkdown(dir); err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile(filepath.Join(dir, "report.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(md), "- "+want) {
		t.Errorf("report.md lacks %q:\n%s", want, md)
	}
}

func TestWorkloadSaysWhereGlobalnetTrafficGoes(t *testing.T) {
	plain := ThroughputOptions{}
	if w := plain.workload(); strings.Contains(w, "global") {
		t.Errorf("workload without globalnet mentions it: %q", w)
	}
	gn := ThroughputOptions{Globalnet: true}
	if w := gn.workload(); !strings.Contains(w, "c1 to server pod in c2") || !strings.Contains(w, "g1") || !strings.Contains(w, "global IP") {
		t.Errorf("workload with globalnet: %q, want both paths described", w)
	}
}
