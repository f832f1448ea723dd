// Package natengine is Globalnet: it translates packets between a cluster's
// own addresses (pod and service CIDRs, which may overlap other clusters')
// and the global address space, with its own connection tracking. It is pure
// logic over package packet: no I/O, an injected clock.
//
// The gateway calls Egress for packets leaving towards a remote cluster's
// global CIDR and Ingress for packets arriving from one. Rules are an
// immutable snapshot swapped atomically by SetRules; flows live in the
// connection-tracking table across rule changes while their rule does.
package natengine
