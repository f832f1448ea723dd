package perf

import "github.com/snorkel-net/snorkel/transport"

// The ratios of throughput the project holds itself to, each a system's
// median over its baseline's in the same run: goals for the data path,
// reported, never asserted. A target is per workload; 0 is none.
const (
	// WireGuardTarget: Snorkel's WireGuard transport against plain
	// wireguard-go, on every workload.
	WireGuardTarget = 1.0
	// ESPTCPTarget: Snorkel's ESP transport against plain wireguard-go,
	// the fastest userspace encryption baseline, on the TCP workloads.
	ESPTCPTarget = 1.5
	// ESPUDPTarget: Snorkel's ESP transport against strongSwan's ESP on
	// the UDP forwarding rate.
	ESPUDPTarget = 1.0
	// VXLANTCPTarget: Snorkel's VXLAN transport, in userspace, against
	// the kernel's vxlan device, on the TCP workloads.
	VXLANTCPTarget = 0.6
	// GlobalnetTarget: a Snorkel transport with Globalnet, both gateways
	// translating every packet, against the same transport without it,
	// on every workload.
	GlobalnetTarget = 0.95
)

// comparisons returns the comparisons of a run, their ratios left to
// fill in. On every throughput workload's primary metric: each Snorkel
// system without Globalnet against the veth ceiling and against its
// counterparts (WireGuard and ESP against wireguard-go, ESP against
// strongSwan, VXLAN against the kernel's vxlan), and each Globalnet system
// against its transport without Globalnet. Unavailable systems take part
// in none.
func comparisons(systems []SystemInfo, workloads []Workload) []Comparison {
	type pair struct {
		system, baseline string
		tcp, udp         float64 // targets
	}
	var pairs []pair
	for _, s := range systems {
		if s.Kind != KindSnorkel || s.Unavailable != "" {
			continue
		}
		for _, b := range systems {
			if b.Unavailable != "" {
				continue
			}
			switch {
			case s.Globalnet && b.Kind == KindSnorkel && !b.Globalnet && b.Transport == s.Transport:
				pairs = append(pairs, pair{s.Name, b.Name, GlobalnetTarget, GlobalnetTarget})
			case s.Globalnet || b.Kind != KindBaseline:
			case b.Name == BaselineVeth:
				pairs = append(pairs, pair{s.Name, b.Name, 0, 0})
			case b.Name == BaselineWireGuardGo && s.Transport == transport.WireGuard:
				pairs = append(pairs, pair{s.Name, b.Name, WireGuardTarget, WireGuardTarget})
			case b.Name == BaselineWireGuardGo && s.Transport == transport.ESP:
				pairs = append(pairs, pair{s.Name, b.Name, ESPTCPTarget, 0})
			case b.Name == BaselineStrongSwan && s.Transport == transport.ESP:
				pairs = append(pairs, pair{s.Name, b.Name, 0, ESPUDPTarget})
			case b.Name == BaselineKernelVXLAN && s.Transport == transport.VXLAN:
				pairs = append(pairs, pair{s.Name, b.Name, VXLANTCPTarget, 0})
			}
		}
	}
	var out []Comparison
	for _, p := range pairs {
		for _, w := range workloads {
			if w.Benchmark != BenchmarkThroughput {
				continue
			}
			target := p.tcp
			if w.Name == WorkloadUDP {
				target = p.udp
			}
			out = append(out, Comparison{Workload: w.Name, Metric: w.Primary, System: p.system, Baseline: p.baseline, Target: target})
		}
	}
	return out
}
