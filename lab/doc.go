// Package lab builds the Snorkel lab on one Linux host: the clusters of the
// Submariner tutorial as network namespaces (per cluster a gateway node
// running a real `snorkel gateway` on a TUN device, and pods routed through
// it), an underlay bridge between the gateways, ClusterIP services
// load-balanced with nftables the way kube-proxy does, and a demo that checks
// pod-to-pod and pod-to-service traffic across clusters. The globalnet
// scenario gives both clusters the same CIDRs and joins them through
// Globalnet's global addresses.
//
// A Scenario says what to build; Plan turns it into names and addresses
// without touching the system, so that it can be tested without root; Up
// builds a plan with lab/topo and Demo runs the checks. The perf harness
// reuses Up to measure traffic between pods of different clusters.
package lab
