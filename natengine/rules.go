package natengine

import "net/netip"

// Rules is one immutable snapshot of what Globalnet translates. The gateway's
// remote indices (the `remote` argument of Egress and Ingress) index Remotes.
type Rules struct {
	// Local are this cluster's pod and service CIDRs: the only sources
	// Egress translates and the only destinations Ingress produces.
	Local []netip.Prefix
	// Global is this cluster's global CIDR.
	Global netip.Prefix
	// Remotes are the remote clusters' global CIDRs, by remote index.
	Remotes []netip.Prefix
	// ClusterEgress is the cluster's egress pool: the source addresses of
	// pods no other pool claims.
	ClusterEgress []netip.Addr
	// Pools are GlobalEgressIP pools. A pod-selector pool takes precedence
	// over a namespace pool, which takes precedence over a headless pod's own
	// global IP, which takes precedence over ClusterEgress.
	Pools []EgressPool
	// Ingress maps global IPs to local addresses.
	Ingress []Ingress
}

// PoolKind says how a GlobalEgressIP pool selects its pods.
type PoolKind uint8

const (
	// PoolNamespace is a GlobalEgressIP without a podSelector.
	PoolNamespace PoolKind = iota + 1
	// PoolPodSelector is a GlobalEgressIP with a podSelector.
	PoolPodSelector
)

// EgressPool is a GlobalEgressIP resolved to addresses: the controller (or
// the static config) turns its namespace or selector into member pods.
type EgressPool struct {
	Name    string
	Kind    PoolKind
	Members []netip.Prefix // the pods' addresses (host prefixes, usually)
	IPs     []netip.Addr   // global IPs, inside Rules.Global
}

// IngressKind says what an ingress global IP stands for.
type IngressKind uint8

const (
	// IngressService is an exported ClusterIP service: traffic to the global
	// IP, any port, goes to the ClusterIP (kube-proxy load-balances).
	IngressService IngressKind = iota + 1
	// IngressHeadlessPod is a pod of an exported headless service: its global
	// IP is its own both ways (ingress, and egress unless a pool claims it).
	IngressHeadlessPod
)

// Ingress is one GlobalIngressIP.
type Ingress struct {
	Name   string
	Kind   IngressKind
	Global netip.Addr // inside Rules.Global
	Local  netip.Addr // the ClusterIP or the pod IP
}
