// Package perf is Snorkel's benchmark harness, behind `snorkel benchmark`.
// It brings up the systems under test side by side on the lab topology of
// package lab (Snorkel's gateways over each transport, with and without
// Globalnet, and the baselines: plain veth routing, the kernel's vxlan
// device, wireguard-go configured with wg, and strongSwan with its
// userspace ESP data plane), drives workloads between a pod of one cluster
// and a pod of another, and writes every measurement to results.json with
// a report.md and SVG plots.
//
// The workloads are iperf3 TCP with one and ten flows each way, the
// highest UDP packet rate forwarded with at most 0.1% lost (RFC 2544),
// searched by paced trials of a generator that counts sent against
// received, TCP
// request/response round trips (netperf's TCP_RR, done here by RunRR and
// ServeRR) and ping. Around each one the harness samples the CPU and peak
// memory of the tunnel processes, from which it reports CPU seconds per
// gigabit; where the kernel carries the traffic its CPU is not
// attributable, and the report says so.
//
// Every system stays up for the whole run and the repetitions are
// interleaved (every system once, then the next round), so that drift on a
// shared machine hits all systems alike; comparisons are ratios taken
// within one run, never against numbers from another machine or day. A
// baseline that cannot run on the machine is reported unavailable, with
// the reason.
//
// Running a benchmark needs root (network namespaces, TUN devices); the
// parsers, statistics, report and plot writers do not, and are tested
// without it. The Kubernetes mode, between pods of two real clusters, is
// package perf/kube. Nothing here is safe for concurrent use unless its
// doc says so.
package perf
