// Package perf is Snorkel's benchmark harness, behind `snorkel benchmark`.
// It brings up the systems under test side by side (Snorkel gateways over
// each transport, and baselines such as plain wireguard-go) on the lab
// topology of perf/lab, drives traffic between a pod of one cluster and a pod
// of another, and writes the measurements as results.json and a report.md.
//
// Every system stays up for the whole run and the repetitions are
// interleaved (one of each system, then the next round), so that drift on a
// shared machine hits all systems alike; comparisons are ratios taken within
// one run, never against numbers from another machine or day.
//
// The data types are shaped for more workloads and baselines than the first
// one: a System is anything that carries traffic from a client namespace to a
// server address, a Measurement holds named metrics, and summaries and
// comparisons are computed per metric.
//
// Running a benchmark needs root (network namespaces, TUN devices); the
// parsers, statistics and report writers do not, and are tested without it.
// Nothing here is safe for concurrent use unless its doc says so.
package perf
