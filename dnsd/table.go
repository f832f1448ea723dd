package dnsd

import (
	"cmp"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// table is the compiled, immutable form of the store's state that queries
// read. Only its round-robin counters and cached metric children change,
// atomically. A change to the state compiles a new table.
type table struct {
	// services by "<svc>.<ns>", the bytes a query name holds in a row.
	services map[string]*service
	// namespaces that have a service: "<ns>.svc.<zone>" exists.
	namespaces map[string]struct{}
	// serial is the zone's SOA serial.
	serial uint32
}

// family indexes per-family lists: A or AAAA.
type family int

const (
	v4 family = iota
	v6
	families
)

func familyOf(a netip.Addr) family {
	if a.Is4() {
		return v4
	}
	return v6
}

// service is one service, ready to answer.
type service struct {
	name, namespace string
	headless        bool
	// localID is the local cluster's ID, the metrics' source cluster.
	localID string
	// targets are "<svc>.<ns>.svc.<zone>", per zone: SRV targets.
	targets []string
	// ports are the ServiceImport's: a clusterset IP's SRV answer.
	ports []port
	// known are the ports of the service and of every cluster: the
	// _<port>._<proto> names that exist.
	known []port
	// merged are, per family, the ports every cluster with an address of
	// the family has: a <svc> name's SRV answer, as Lighthouse merges
	// them (coredns/resolver/ip_family_info.go, mergePorts).
	merged   [families][]port
	exports  []*export
	clusters map[string]*export

	// A ClusterSetIP service answers, in order of preference, with its
	// clusterset IPs, the local cluster's address when it is ready, or one
	// of the eligible clusters' in turn.
	vip      [families][]*addr
	local    *export
	eligible [families][]*export
	// next are the round-robin counters, per family: a client asking for
	// A and AAAA together must not skip every other cluster. SRV answers
	// turn the IPv4 counter (the IPv6 one without IPv4), as Lighthouse's
	// do.
	next [families]atomic.Uint32

	// A headless service answers with the published endpoints of the
	// connected clusters.
	published [families][]*addr
	// pods are the published endpoints of connected clusters, for SRV.
	pods []*endpoint
}

// export is one cluster's part of a service.
type export struct {
	cluster string
	// targets are "<cluster>.<svc>.<ns>.svc.<zone>", per zone.
	targets []string
	ready   bool
	// connected: the local cluster, or one the gateway reports connected.
	connected bool
	// ips of a ClusterSetIP service.
	ips [families][]*addr
	// ports of this cluster; the service's when it has none of its own.
	ports []port
	// published endpoints: the ready ones, all with publishNotReady.
	endpoints []*endpoint
	byFamily  [families][]*addr
	hosts     map[string]*endpoint
}

type endpoint struct {
	host  string
	addrs []*addr
	exp   *export
	// targets are "<host>.<cluster>.<svc>.<ns>.svc.<zone>", per zone.
	targets []string
}

// port is a Port with its name and protocol lower-cased for matching.
type port struct {
	name, proto string
	number      uint16
}

// addr is one address an answer may carry, with what the metrics need to
// count it.
type addr struct {
	ip      net.IP
	fam     family
	cluster string
	gauge   atomic.Pointer[prometheus.Gauge]
	svc     *service
}

// compile builds a table from services and the clusters' connectivity.
// Services it cannot serve are left out and reported in the error.
func compile(zones []string, local string, connected map[string]bool, services []Service, serial uint32) (*table, error) {
	t := &table{
		services:   make(map[string]*service, len(services)),
		namespaces: map[string]struct{}{},
		serial:     serial,
	}
	var errs []error
	for i := range services {
		in := &services[i]
		if !isLabel(in.Name) || !isLabel(in.Namespace) {
			errs = append(errs, fmt.Errorf("service %q in namespace %q: names must be DNS-1123 labels", in.Name, in.Namespace))
			continue
		}
		k := in.Name + "." + in.Namespace
		if _, dup := t.services[k]; dup {
			errs = append(errs, fmt.Errorf("service %s/%s: listed twice; the first is served", in.Namespace, in.Name))
			continue
		}
		s, err := compileService(in, zones, local, connected)
		if err != nil {
			errs = append(errs, err)
		}
		t.services[k] = s
		t.namespaces[in.Namespace] = struct{}{}
	}
	return t, errors.Join(errs...)
}

func compileService(in *Service, zones []string, local string, connected map[string]bool) (*service, error) {
	s := &service{
		name:      in.Name,
		namespace: in.Namespace,
		headless:  in.Headless,
		localID:   local,
		targets:   withZones(in.Name+"."+in.Namespace+".svc.", zones),
		ports:     compilePorts(in.Ports),
		clusters:  make(map[string]*export, len(in.Exports)),
	}
	var errs []error
	for _, ip := range in.ClusterSetIPs {
		if ip.IsValid() {
			s.vip[familyOf(ip.Unmap())] = append(s.vip[familyOf(ip.Unmap())], s.newAddr(ip, ""))
		}
	}
	exps := slices.Clone(in.Exports)
	slices.SortFunc(exps, func(a, b Export) int { return cmp.Compare(a.Cluster, b.Cluster) })
	for i := range exps {
		ex := &exps[i]
		if !isLabel(ex.Cluster) {
			errs = append(errs, fmt.Errorf("service %s/%s: cluster ID %q is not a DNS-1123 label", in.Namespace, in.Name, ex.Cluster))
			continue
		}
		if _, dup := s.clusters[ex.Cluster]; dup {
			errs = append(errs, fmt.Errorf("service %s/%s: cluster %s listed twice; the first is served", in.Namespace, in.Name, ex.Cluster))
			continue
		}
		e := s.compileExport(ex, zones, ex.Cluster == local || connected[ex.Cluster])
		s.exports = append(s.exports, e)
		s.clusters[e.cluster] = e
	}
	s.known = slices.Clone(s.ports)
	for _, e := range s.exports {
		for _, p := range e.ports {
			if !slices.Contains(s.known, p) {
				s.known = append(s.known, p)
			}
		}
	}
	if s.headless {
		for _, e := range s.exports {
			if !e.connected {
				continue
			}
			for f := range families {
				s.published[f] = append(s.published[f], e.byFamily[f]...)
			}
			s.pods = append(s.pods, e.endpoints...)
		}
		return s, errors.Join(errs...)
	}
	for _, e := range s.exports {
		for f := range families {
			if len(e.ips[f]) > 0 {
				s.merged[f] = intersect(s.merged[f], e.ports, s.merged[f] == nil)
			}
		}
		switch {
		case !e.ready:
		case e.cluster == local:
			s.local = e
		case e.connected:
			for f := range families {
				if len(e.ips[f]) > 0 {
					s.eligible[f] = append(s.eligible[f], e)
				}
			}
		}
	}
	return s, errors.Join(errs...)
}

func (s *service) compileExport(in *Export, zones []string, connected bool) *export {
	stem := in.Cluster + "." + s.name + "." + s.namespace + ".svc."
	e := &export{cluster: in.Cluster, targets: withZones(stem, zones), ready: in.Ready, connected: connected, ports: s.ports}
	if in.Ports != nil {
		e.ports = compilePorts(in.Ports)
	}
	if !s.headless {
		for _, ip := range in.IPs {
			if routable(ip) {
				f := familyOf(ip.Unmap())
				e.ips[f] = append(e.ips[f], s.newAddr(ip, in.Cluster))
			}
		}
		return e
	}
	seen := map[netip.Addr]bool{}
	for _, pod := range in.Endpoints {
		if !pod.Ready && !in.PublishNotReady {
			continue
		}
		var addrs []*addr
		for _, a := range pod.Addresses {
			a = a.Unmap()
			if !routable(a) || seen[a] {
				continue
			}
			seen[a] = true
			addrs = append(addrs, s.newAddr(a, e.cluster))
		}
		if h := strings.ToLower(pod.Hostname); isLabel(h) {
			e.addEndpoint(h, addrs, stem, zones)
			continue
		}
		for _, a := range addrs {
			e.addEndpoint(addressName(a.ip), []*addr{a}, stem, zones)
		}
	}
	return e
}

// addEndpoint publishes a pod's addresses under host. Two pods claiming
// one hostname, or one pod's addresses of both families, are one name
// answering with all their addresses, as a cluster-local DNS does; its SRV
// records are not repeated.
func (e *export) addEndpoint(host string, addrs []*addr, stem string, zones []string) {
	if len(addrs) == 0 {
		return
	}
	for _, a := range addrs {
		e.byFamily[a.fam] = append(e.byFamily[a.fam], a)
	}
	if prev := e.hosts[host]; prev != nil {
		prev.addrs = append(prev.addrs, addrs...)
		return
	}
	ep := &endpoint{host: host, addrs: addrs, exp: e, targets: withZones(host+"."+stem, zones)}
	if e.hosts == nil {
		e.hosts = map[string]*endpoint{}
	}
	e.hosts[host] = ep
	e.endpoints = append(e.endpoints, ep)
}

// addressName is the name Lighthouse gives an endpoint without a
// hostname: its address with dots or colons as dashes, 10-9-0-12 or
// fd00-9--10 (coredns/resolver/endpoint_slice.go,
// putHeadlessEndpointSlices).
func addressName(ip net.IP) string {
	sep := "."
	if ip.To4() == nil {
		sep = ":"
	}
	return strings.ReplaceAll(ip.String(), sep, "-")
}

// broadcast is IPv4's limited broadcast address.
var broadcast = netip.AddrFrom4([4]byte{255, 255, 255, 255})

// routable reports whether a cluster's endpoint address may be answered.
// Endpoints come from other clusters through the broker; as Lighthouse
// does, dnsd refuses those that would send a client to itself, to its own
// link (the cloud metadata service at 169.254.169.254 among them), to no
// host or to a group (coredns/resolver/endpoint_slice.go,
// isPermittedEndpointAddress). A ClusterSetIP export left with no address
// in a family has none to offer in it.
func routable(a netip.Addr) bool {
	a = a.Unmap()
	return a.IsValid() && !a.IsUnspecified() && !a.IsLoopback() && !a.IsLinkLocalUnicast() &&
		!a.IsMulticast() && a != broadcast
}

func (s *service) newAddr(ip netip.Addr, cluster string) *addr {
	ip = ip.Unmap()
	return &addr{ip: net.IP(ip.AsSlice()), fam: familyOf(ip), cluster: cluster, svc: s}
}

// withZones is stem followed by each zone.
func withZones(stem string, zones []string) []string {
	out := make([]string, len(zones))
	for i, z := range zones {
		out[i] = stem + z
	}
	return out
}

func compilePorts(in []Port) []port {
	out := make([]port, 0, len(in))
	for _, p := range in {
		q := port{name: strings.ToLower(p.Name), proto: strings.ToLower(p.Protocol), number: p.Port}
		if q.proto == "" {
			q.proto = "tcp"
		}
		if !slices.Contains(out, q) {
			out = append(out, q)
		}
	}
	return out
}

// intersect is the ports of have that ports has too; ports itself when
// first.
func intersect(have, ports []port, first bool) []port {
	if first {
		return slices.Clone(ports)
	}
	out := []port{}
	for _, p := range have {
		if slices.Contains(ports, p) {
			out = append(out, p)
		}
	}
	return out
}

// hasPort reports whether ports has a named port of protocol proto named
// name, or of any name when name is nil: whether _<name>._<proto>, or
// _<proto>, exists.
func hasPort(ports []port, name, proto []byte) bool {
	for _, p := range ports {
		if (name == nil || p.name == string(name)) && p.proto == string(proto) && p.name != "" {
			return true
		}
	}
	return false
}
