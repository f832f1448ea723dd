package perf

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/snorkel-net/snorkel/lab"
)

func TestSetupsPutGlobalnetAfterEachTransportAndBaselinesLast(t *testing.T) {
	o := Options{Transports: []string{"wireguard", "vxlan", "esp"}, Globalnet: true, Baselines: slices.Clone(BaselineNames), OutDir: "x"}
	o.applyDefaults()
	if err := o.validate(); err != nil {
		t.Fatalf("validate refused good options: %v", err)
	}
	var names, tags []string
	for _, s := range o.setups() {
		names, tags = append(names, s.Name), append(tags, s.Tag)
		if want := map[bool]string{true: KindSnorkel, false: KindBaseline}[strings.HasPrefix(s.Name, "snorkel-")]; s.Kind != want {
			t.Errorf("%s: kind %q, want %q (it decides whether failing to come up fails the run)", s.Name, s.Kind, want)
		}
	}
	wantNames := []string{"snorkel-wireguard", "snorkel-wireguard-globalnet", "snorkel-vxlan", "snorkel-vxlan-globalnet", "snorkel-esp", "snorkel-esp-globalnet",
		"veth", "kernel-vxlan", "wireguard-go", "strongswan"}
	if !slices.Equal(names, wantNames) {
		t.Errorf("setups %v, want %v", names, wantNames)
	}
	if want := []string{"sw", "gw", "sv", "gv", "se", "ge", "ve", "kv", "wg", "ss"}; !slices.Equal(tags, want) {
		t.Errorf("tags %v, want %v", tags, want)
	}
}

func TestKernelIsAnOlderNameOfTheVethBaseline(t *testing.T) {
	o := Options{Baselines: []string{"kernel", BaselineWireGuardGo}, OutDir: "x"}
	o.applyDefaults()
	if err := o.validate(); err != nil {
		t.Fatalf("validate refused baseline kernel: %v", err)
	}
	if !slices.Equal(o.Baselines, []string{BaselineVeth, BaselineWireGuardGo}) {
		t.Errorf("baselines %v, want veth and wireguard-go", o.Baselines)
	}
}

// TestTagsFitTheLongestPrefix resolves both scenarios with the longest
// prefix validate allows and every system's tag, which NewPlan refuses when
// a namespace or interface name would not fit.
func TestTagsFitTheLongestPrefix(t *testing.T) {
	o := Options{Transports: []string{"wireguard", "vxlan", "esp"}, Globalnet: true, Baselines: slices.Clone(BaselineNames), OutDir: "x", Prefix: "abcdefghi"}
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

func TestOptionsNameEveryBadFlag(t *testing.T) {
	o := Options{Benchmark: "speed", Transports: []string{"ipsec"}, Baselines: []string{"openvpn"}, Reps: -1, Duration: 1500 * time.Millisecond,
		Prefix: "much-too-long-", UDPRate: -5}
	o.applyDefaults()
	err := o.validate()
	if err == nil {
		t.Fatal("validate accepted bad options")
	}
	for _, want := range []string{`benchmark "speed"`, `transport "ipsec"`, `baseline "openvpn"`, "reps -1", "duration 1.5s", "udp-rate -5", "out:", "prefix"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q: %v", want, err)
		}
	}
}

func TestGlobalnetWithoutATransportIsRefused(t *testing.T) {
	o := Options{Globalnet: true, Baselines: []string{BaselineVeth}, OutDir: "x"}
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

func TestBenchmarksSelectTheirWorkloads(t *testing.T) {
	for _, tc := range []struct {
		benchmark string
		want      []string
	}{
		{BenchmarkThroughput, []string{"tcp-1", "tcp-1-rev", "tcp-10", "tcp-10-rev", "udp-64"}},
		{BenchmarkLatency, []string{"tcp-rr", "ping"}},
		{BenchmarkAll, []string{"tcp-1", "tcp-1-rev", "tcp-10", "tcp-10-rev", "udp-64", "tcp-rr", "ping"}},
	} {
		var got []string
		for _, w := range WorkloadsOf(tc.benchmark) {
			got = append(got, w.Name)
			if w.run == nil || w.Primary == "" || !slices.ContainsFunc(w.Metrics, func(m Metric) bool { return m.Name == w.Primary }) {
				t.Errorf("%s: no run function, or primary metric %q not among its metrics", w.Name, w.Primary)
			}
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: workloads %v, want %v", tc.benchmark, got, tc.want)
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

func TestComparisonsPairEachTransportWithItsCounterpartAndTarget(t *testing.T) {
	systems := []SystemInfo{
		{Name: "snorkel-wireguard", Kind: KindSnorkel, Transport: "wireguard"},
		{Name: "snorkel-wireguard-globalnet", Kind: KindSnorkel, Transport: "wireguard", Globalnet: true},
		{Name: "snorkel-vxlan", Kind: KindSnorkel, Transport: "vxlan"},
		{Name: "snorkel-esp", Kind: KindSnorkel, Transport: "esp"},
		{Name: "snorkel-esp-globalnet", Kind: KindSnorkel, Transport: "esp", Globalnet: true, Unavailable: "did not come up"},
		{Name: "veth", Kind: KindBaseline, KernelDataPath: true},
		{Name: "kernel-vxlan", Kind: KindBaseline, Transport: "vxlan", KernelDataPath: true},
		{Name: "wireguard-go", Kind: KindBaseline, Transport: "wireguard"},
		{Name: "strongswan", Kind: KindBaseline, Transport: "esp"},
	}
	// pairs lists the comparisons on workload w, with their targets.
	pairs := func(w string) []string {
		var out []string
		for _, c := range comparisons(systems, WorkloadsOf(BenchmarkThroughput)) {
			if c.Workload == w {
				if c.Metric != MetricThroughput.Name && c.Metric != MetricUDPRate.Name {
					t.Errorf("%s / %s compares %s %s", c.System, c.Baseline, c.Workload, c.Metric)
				}
				out = append(out, fmt.Sprintf("%s/%s %g", c.System, c.Baseline, c.Target))
			}
		}
		return out
	}
	got := pairs(WorkloadTCP1)
	want := []string{
		"snorkel-wireguard/veth 0",
		"snorkel-wireguard/wireguard-go 1",
		"snorkel-wireguard-globalnet/snorkel-wireguard 0.95",
		"snorkel-vxlan/veth 0",
		"snorkel-vxlan/kernel-vxlan 0.6",
		"snorkel-esp/veth 0",
		"snorkel-esp/wireguard-go 1.5",
		"snorkel-esp/strongswan 0",
	}
	if !slices.Equal(got, want) {
		t.Errorf("comparisons\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// On the UDP forwarding rate ESP is held to strongSwan's, and VXLAN
	// and ESP to no wireguard-go or kernel figure.
	got = pairs(WorkloadUDP)
	wantUDP := []string{
		"snorkel-wireguard/veth 0",
		"snorkel-wireguard/wireguard-go 1",
		"snorkel-wireguard-globalnet/snorkel-wireguard 0.95",
		"snorkel-vxlan/veth 0",
		"snorkel-vxlan/kernel-vxlan 0",
		"snorkel-esp/veth 0",
		"snorkel-esp/wireguard-go 0",
		"snorkel-esp/strongswan 1",
	}
	if !slices.Equal(got, wantUDP) {
		t.Errorf("UDP comparisons\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(wantUDP, "\n"))
	}
	if cs := comparisons(systems, WorkloadsOf(BenchmarkLatency)); len(cs) != 0 {
		t.Errorf("latency workloads compared: %+v", cs)
	}
	if n := len(comparisons(systems, WorkloadsOf(BenchmarkThroughput))); n != len(want)*5 {
		t.Errorf("%d comparisons over the five throughput workloads, want %d", n, len(want)*5)
	}
}

func TestCostIsPerGigabitAndPeakMemoryIsTheLargestProcess(t *testing.T) {
	m := Measurement{
		Values:    map[string]float64{MetricThroughput.Name: 2e9},
		Processes: []ProcessCPU{{Name: "gateway-c1", Percent: 80, PeakRSS: 30 << 20}, {Name: "gateway-c2", Percent: 70, PeakRSS: 40 << 20}},
	}
	m.addCost()
	// 1.5 cores for 2 Gb/s: 0.75 CPU seconds per gigabit.
	if got := m.Values[MetricCPUPerGbit.Name]; got != 0.75 {
		t.Errorf("CPU per Gbit %v, want 0.75", got)
	}
	if got := m.Values[MetricTunnelCPU.Name]; got != 150 {
		t.Errorf("tunnel CPU %v, want 150", got)
	}
	if got := m.Values[MetricPeakRSS.Name]; got != 40<<20 {
		t.Errorf("peak RSS %v, want %d", got, 40<<20)
	}
	kernel := Measurement{Values: map[string]float64{MetricThroughput.Name: 10e9}}
	kernel.addCost()
	for _, name := range []string{MetricCPUPerGbit.Name, MetricTunnelCPU.Name, MetricPeakRSS.Name} {
		if _, ok := kernel.Values[name]; ok {
			t.Errorf("a system without tunnel processes got %s", name)
		}
	}
	latency := Measurement{Values: map[string]float64{MetricP50.Name: 80}, Processes: m.Processes}
	latency.addCost()
	if _, ok := latency.Values[MetricCPUPerGbit.Name]; ok {
		t.Error("a workload that moved no TCP payload got a CPU cost per gigabit")
	}
}
