package dnsd

import (
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
