package dnsd

import (
	"fmt"
	"sort"
	"testing"

	"github.com/miekg/dns"
)

// Each test here pins one behaviour dnsd shares with current upstream
// Lighthouse (submariner-io/lighthouse, coredns/plugin and
// coredns/resolver); the comment on each names the code it follows.

// coredns/resolver/endpoint_slice.go, isPermittedEndpointAddress: the
// addresses other clusters publish are not answered when they would send
// a client to itself, its link, no host or a group.
func TestNonRoutableEndpointAddressesAreNotAnswered(t *testing.T) {
	st := State{LocalCluster: "c1", Connected: []string{"c2", "c3"}, Services: []Service{
		{Namespace: "sample", Name: "bad-ip", Exports: []Export{
			{Cluster: "c2", IPs: ips("127.0.0.1"), Ready: true},
			{Cluster: "c3", IPs: ips("10.98.0.30"), Ready: true},
		}},
		{Namespace: "sample", Name: "bad-dual", Exports: []Export{
			{Cluster: "c2", IPs: ips("10.99.0.31", "fe80::1"), Ready: true},
		}},
		{Namespace: "sample", Name: "only-bad", Exports: []Export{
			{Cluster: "c2", IPs: ips("169.254.169.254"), Ready: true},
		}},
		{Namespace: "sample", Name: "pods", Headless: true, Exports: []Export{
			{Cluster: "c2", Endpoints: []Endpoint{
				{Hostname: "good", Addresses: ips("10.9.0.50"), Ready: true},
				{Hostname: "loop", Addresses: ips("127.0.0.53"), Ready: true},
				{Hostname: "meta", Addresses: ips("169.254.169.254"), Ready: true},
				{Hostname: "unspec", Addresses: ips("0.0.0.0"), Ready: true},
				{Hostname: "bcast", Addresses: ips("255.255.255.255"), Ready: true},
				{Hostname: "mcast", Addresses: ips("224.0.0.1"), Ready: true},
				{Hostname: "six", Addresses: ips("fd00:9::50", "::1", "fe80::2", "ff02::1", "::"), Ready: true},
				{Hostname: "mapped", Addresses: ips("::ffff:127.0.0.1"), Ready: true},
			}},
		}},
	}}
	s := newServer(t, Config{}, st)
	tests := []struct {
		name  string
		qname string
		qtype uint16
		rcode int
		want  []string
	}{
		{"a cluster publishing loopback is passed over for one that is not", "bad-ip" + zone, dns.TypeA, dns.RcodeSuccess, []string{"10.98.0.30"}},
		{"a cluster's loopback address is not answered for its own name", "c2.bad-ip" + zone, dns.TypeA, dns.RcodeSuccess, nil},
		{"a link-local IPv6 address is dropped, the IPv4 one kept", "bad-dual" + zone, dns.TypeA, dns.RcodeSuccess, []string{"10.99.0.31"}},
		{"no AAAA when the only IPv6 address is link-local", "bad-dual" + zone, dns.TypeAAAA, dns.RcodeSuccess, nil},
		{"the cloud metadata address is never an answer", "only-bad" + zone, dns.TypeA, dns.RcodeSuccess, nil},
		{"headless: only the routable pods", "pods" + zone, dns.TypeA, dns.RcodeSuccess, []string{"10.9.0.50"}},
		{"headless AAAA: loopback, link-local, multicast and unspecified dropped", "pods" + zone, dns.TypeAAAA, dns.RcodeSuccess, []string{"fd00:9::50"}},
		{"a pod whose only address is loopback has no name", "loop.c2.pods" + zone, dns.TypeA, dns.RcodeNameError, nil},
		{"nor one at the metadata address", "meta.c2.pods" + zone, dns.TypeA, dns.RcodeNameError, nil},
		{"nor one at the unspecified address", "unspec.c2.pods" + zone, dns.TypeA, dns.RcodeNameError, nil},
		{"nor one at the broadcast address", "bcast.c2.pods" + zone, dns.TypeA, dns.RcodeNameError, nil},
		{"nor one at a multicast address", "mcast.c2.pods" + zone, dns.TypeA, dns.RcodeNameError, nil},
		{"nor one at an IPv4-mapped loopback address", "mapped.c2.pods" + zone, dns.TypeA, dns.RcodeNameError, nil},
		{"a pod keeps its routable address", "six.c2.pods" + zone, dns.TypeAAAA, dns.RcodeSuccess, []string{"fd00:9::50"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := ask(t, s, tc.qname, tc.qtype, qopt{})
			if m.Rcode != tc.rcode {
				t.Fatalf("rcode %s, want %s", dns.RcodeToString[m.Rcode], dns.RcodeToString[tc.rcode])
			}
			if got := addrs(m.Answer); !equal(got, tc.want) {
				t.Errorf("%v, want %v", got, tc.want)
			}
		})
	}
	for range 20 {
		if got := addrs(ask(t, s, "bad-ip"+zone, dns.TypeA, qopt{}).Answer); !equal(got, []string{"10.98.0.30"}) {
			t.Fatalf("round-robin reached %v; a cluster with only loopback is not eligible", got)
		}
	}
}

// coredns/resolver/endpoint_slice.go, putHeadlessEndpointSlices: a pod
// without a hostname is named by its address, dots (IPv4) or colons
// (IPv6) as dashes, and is an SRV target under that name like any other.
func TestEndpointsWithoutHostnameAreNamedByAddress(t *testing.T) {
	http := []Port{{Name: "http", Protocol: "TCP", Port: 80}}
	st := State{LocalCluster: "c1", Connected: []string{"c2"}, Services: []Service{
		{Namespace: "sample", Name: "anon", Headless: true, Ports: http, Exports: []Export{
			{Cluster: "c2", Endpoints: []Endpoint{
				{Addresses: ips("10.9.0.60"), Ready: true},
				{Addresses: ips("fd00:9::60"), Ready: true},
				{Hostname: "Not_A_Label", Addresses: ips("10.9.0.61"), Ready: true},
				{Hostname: "web-0", Addresses: ips("10.9.0.62"), Ready: true},
				{Hostname: "web-0", Addresses: ips("fd00:9::62"), Ready: true},
				{Addresses: ips("10.9.0.63"), Ready: false},
			}},
		}},
	}}
	s := newServer(t, Config{}, st)
	const svc = "anon.sample.svc.clusterset.local."
	tests := []struct {
		name  string
		qname string
		qtype uint16
		rcode int
		want  []string
	}{
		{"an IPv4 pod without a hostname: dots as dashes", "10-9-0-60.c2.anon" + zone, dns.TypeA, dns.RcodeSuccess, []string{"10.9.0.60"}},
		{"an IPv6 pod without a hostname: colons as dashes", "fd00-9--60.c2.anon" + zone, dns.TypeAAAA, dns.RcodeSuccess, []string{"fd00:9::60"}},
		{"a hostname that is not a DNS label falls back to the address", "10-9-0-61.c2.anon" + zone, dns.TypeA, dns.RcodeSuccess, []string{"10.9.0.61"}},
		{"a pod with a hostname has no address name", "10-9-0-62.c2.anon" + zone, dns.TypeA, dns.RcodeNameError, nil},
		{"a pod that is not ready has no address name", "10-9-0-63.c2.anon" + zone, dns.TypeA, dns.RcodeNameError, nil},
		{"an address name exists for the other family too", "10-9-0-60.c2.anon" + zone, dns.TypeAAAA, dns.RcodeSuccess, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := ask(t, s, tc.qname, tc.qtype, qopt{})
			if m.Rcode != tc.rcode {
				t.Fatalf("rcode %s, want %s", dns.RcodeToString[m.Rcode], dns.RcodeToString[tc.rcode])
			}
			if got := addrs(m.Answer); !equal(got, tc.want) {
				t.Errorf("%v, want %v", got, tc.want)
			}
		})
	}

	// Every pod is an SRV target; a pod with addresses in both families
	// (here web-0's two slices' endpoints) is one target, not two
	// identical records (RFC 2181 section 5).
	want := []string{
		"80 10-9-0-60.c2." + svc,
		"80 10-9-0-61.c2." + svc,
		"80 fd00-9--60.c2." + svc,
		"80 web-0.c2." + svc,
	}
	for _, q := range []string{svc, "_http._tcp." + svc} {
		m := ask(t, s, q, dns.TypeSRV, qopt{tcp: true})
		if got := srvs(m.Answer); !equal(got, want) {
			t.Errorf("SRV %s: %v, want %v", q, got, want)
		}
		if got := addrs(m.Extra); !equal(got, []string{"10.9.0.60", "10.9.0.61", "10.9.0.62", "fd00:9::60", "fd00:9::62"}) {
			t.Errorf("SRV %s: additional %v, want every target's addresses once", q, got)
		}
	}
}

// coredns/resolver/ip_family_info.go, mergePorts, and
// coredns/plugin/record.go, createSRVRecords: a ClusterSetIP service's
// SRV answer lists the ports every exporting cluster has (connected or
// not, ready or not), one record per port number; a <cluster> name lists
// that cluster's own; a clusterset IP the ServiceImport's.
func TestSRVPortsAcrossClusters(t *testing.T) {
	http := Port{Name: "http", Protocol: "TCP", Port: 8080}
	udp := Port{Name: "udp", Protocol: "UDP", Port: 42}
	tcp := Port{Name: "tcp", Protocol: "TCP", Port: 42}
	dnsPort := Port{Name: "dns", Protocol: "UDP", Port: 53}
	st := State{LocalCluster: "c1", Connected: []string{"c2", "c3"}, Services: []Service{
		// Lighthouse's handler_test.go, testSRVMultiplePorts.
		{Namespace: "sample", Name: "multi", Ports: []Port{http}, Exports: []Export{
			{Cluster: "c2", IPs: ips("10.99.0.40"), Ready: true, Ports: []Port{http, udp, tcp}},
			{Cluster: "c3", IPs: ips("10.98.0.40"), Ready: true, Ports: []Port{http, udp, tcp, dnsPort}},
		}},
		// testClusterStatus: a disconnected cluster still narrows the set.
		{Namespace: "sample", Name: "narrow", Exports: []Export{
			{Cluster: "c2", IPs: ips("10.99.0.41"), Ready: true, Ports: []Port{http, udp}},
			{Cluster: "c4", IPs: ips("10.97.0.41"), Ready: true, Ports: []Port{http}},
		}},
		// testLocalService: the local cluster answers, the set is still
		// the common one.
		{Namespace: "sample", Name: "local", Exports: []Export{
			{Cluster: "c1", IPs: ips("10.88.0.42"), Ready: true, Ports: []Port{http}},
			{Cluster: "c2", IPs: ips("10.99.0.42"), Ready: true, Ports: []Port{http, udp}},
		}},
		// testClusterSetIP.
		{Namespace: "sample", Name: "vip", Ports: []Port{http, udp}, ClusterSetIPs: ips("243.1.0.1"), Exports: []Export{
			{Cluster: "c2", IPs: ips("10.99.0.43"), Ready: true, Ports: []Port{http}},
			{Cluster: "c3", IPs: ips("10.98.0.43"), Ready: true, Ports: []Port{udp}},
		}},
		{Namespace: "sample", Name: "disjoint", Exports: []Export{
			{Cluster: "c2", IPs: ips("10.99.0.44"), Ready: true, Ports: []Port{http}},
			{Cluster: "c3", IPs: ips("10.98.0.44"), Ready: true, Ports: []Port{dnsPort}},
		}},
	}}
	s := newServer(t, Config{}, st)
	tests := []struct {
		name, qname string
		rcode       int
		want        []string // "port", sorted
	}{
		{"the ports every cluster has, one record per port number", "multi" + zone, dns.RcodeSuccess, []string{"42", "8080"}},
		{"a port every cluster has, by name", "_tcp._tcp.multi" + zone, dns.RcodeSuccess, []string{"42"}},
		{"a port one cluster lacks: the name exists, with no record", "_dns._udp.multi" + zone, dns.RcodeSuccess, nil},
		{"a cluster's own ports under its name", "c3.multi" + zone, dns.RcodeSuccess, []string{"42", "53", "8080"}},
		{"a cluster's own port by name", "_dns._udp.c3.multi" + zone, dns.RcodeSuccess, []string{"53"}},
		{"a disconnected cluster narrows the set", "narrow" + zone, dns.RcodeSuccess, []string{"8080"}},
		{"the local cluster answers with the common set", "local" + zone, dns.RcodeSuccess, []string{"8080"}},
		{"a clusterset IP answers with the ServiceImport's ports", "vip" + zone, dns.RcodeSuccess, []string{"42", "8080"}},
		{"clusters with no port in common: no record", "disjoint" + zone, dns.RcodeSuccess, nil},
		{"a port no cluster has does not exist", "_https._tcp.multi" + zone, dns.RcodeNameError, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := ask(t, s, tc.qname, dns.TypeSRV, qopt{tcp: true})
			if m.Rcode != tc.rcode {
				t.Fatalf("rcode %s, want %s", dns.RcodeToString[m.Rcode], dns.RcodeToString[tc.rcode])
			}
			var got []string
			for _, rr := range m.Answer {
				got = append(got, fmt.Sprint(rr.(*dns.SRV).Port))
			}
			sort.Strings(got)
			if !equal(got, tc.want) {
				t.Errorf("ports %v, want %v", got, tc.want)
			}
		})
	}
}

// coredns/resolver/resolver.go, GetDNSRecords, and ip_family_info.go: A
// answers from the IPv4 endpoints, AAAA from the IPv6 ones; a ClusterSetIP
// service's SRV answer is IPv4's (its merged ports) and IPv6's only when
// no cluster answers in IPv4; a headless service's SRV answer lists the
// pods of both families (coredns/plugin/ip_family_test.go).
func TestDualStack(t *testing.T) {
	p1 := Port{Name: "http", Protocol: "TCP", Port: 8080}
	p2 := Port{Name: "udp", Protocol: "UDP", Port: 42}
	st := State{LocalCluster: "c1", Connected: []string{"c2", "c3"}, Services: []Service{
		{Namespace: "sample", Name: "both", Exports: []Export{
			{Cluster: "c2", IPs: ips("10.99.0.50", "fd00:99::50"), Ready: true, Ports: []Port{p1, p2}},
			{Cluster: "c3", IPs: ips("fd00:98::50"), Ready: true, Ports: []Port{p1}},
		}},
		{Namespace: "sample", Name: "six", Exports: []Export{
			{Cluster: "c2", IPs: ips("fd00:99::51"), Ready: true, Ports: []Port{p1, p2}},
			{Cluster: "c3", IPs: ips("fd00:98::51"), Ready: true, Ports: []Port{p2}},
		}},
		{Namespace: "sample", Name: "pods", Headless: true, Ports: []Port{p1}, Exports: []Export{
			{Cluster: "c2", Endpoints: []Endpoint{
				{Addresses: ips("10.9.0.52"), Ready: true},
				{Addresses: ips("fd00:9::52"), Ready: true},
				{Hostname: "web-0", Addresses: ips("10.9.0.53"), Ready: true},
				{Hostname: "web-0", Addresses: ips("fd00:9::53"), Ready: true},
			}},
		}},
	}}
	s := newServer(t, Config{}, st)
	const pods = "pods.sample.svc.clusterset.local."
	tests := []struct {
		name, qname string
		qtype       uint16
		want        []string
	}{
		{"A: the IPv4 cluster", "both" + zone, dns.TypeA, []string{"10.99.0.50"}},
		{"SRV: IPv4 first, with IPv4's ports (c2's alone)", "both" + zone, dns.TypeSRV, []string{"42 both.sample.svc.clusterset.local.", "8080 both.sample.svc.clusterset.local."}},
		{"SRV: IPv6's merged ports when no cluster answers in IPv4", "six" + zone, dns.TypeSRV, []string{"42 six.sample.svc.clusterset.local."}},
		{"<cluster> AAAA of a cluster with both families", "c2.both" + zone, dns.TypeAAAA, []string{"fd00:99::50"}},
		{"headless A: the IPv4 pods", "pods" + zone, dns.TypeA, []string{"10.9.0.52", "10.9.0.53"}},
		{"headless AAAA: the IPv6 pods", "pods" + zone, dns.TypeAAAA, []string{"fd00:9::52", "fd00:9::53"}},
		{"a dual-stack pod's name answers in both families", "web-0.c2.pods" + zone, dns.TypeAAAA, []string{"fd00:9::53"}},
		{"headless SRV: the pods of both families", "pods" + zone, dns.TypeSRV, []string{"8080 10-9-0-52.c2." + pods, "8080 fd00-9--52.c2." + pods, "8080 web-0.c2." + pods}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := ask(t, s, tc.qname, tc.qtype, qopt{tcp: true})
			if m.Rcode != dns.RcodeSuccess {
				t.Fatalf("rcode %s", dns.RcodeToString[m.Rcode])
			}
			got := addrs(m.Answer)
			if tc.qtype == dns.TypeSRV {
				got = srvs(m.Answer)
			}
			if !equal(got, tc.want) {
				t.Errorf("%v, want %v", got, tc.want)
			}
		})
	}

	// AAAA round-robins over the IPv6 clusters, whatever A does.
	seen := map[string]int{}
	for range 10 {
		seen[addrs(ask(t, s, "both"+zone, dns.TypeAAAA, qopt{}).Answer)[0]]++
	}
	if seen["fd00:99::50"] != 5 || seen["fd00:98::50"] != 5 {
		t.Errorf("10 AAAA queries went %v; want 5 to each IPv6 cluster", seen)
	}
}
