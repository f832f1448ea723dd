package dnsd

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
)

const zone = ".sample.svc.clusterset.local."

func TestAnswers(t *testing.T) {
	s := newServer(t, Config{}, tutorial())
	tests := []struct {
		name  string
		qname string
		qtype uint16
		rcode int
		want  []string // addresses, sorted; nil for none
	}{
		{"the local cluster's address when it exports the service with a ready backend", "local-first" + zone, dns.TypeA, dns.RcodeSuccess, []string{"10.88.0.20"}},
		{"another cluster's when the local one has no ready backend", "local-unready" + zone, dns.TypeA, dns.RcodeSuccess, []string{"10.99.0.21"}},
		{"a <cluster> name answers with that cluster's address", "c2.whereami-cs" + zone, dns.TypeA, dns.RcodeSuccess, []string{"10.99.0.10"}},
		{"a <cluster> name answers for a disconnected cluster too", "c4.whereami-cs" + zone, dns.TypeA, dns.RcodeSuccess, []string{"10.97.0.10"}},
		{"a <cluster> name answers for a cluster with no ready backend too", "c1.local-unready" + zone, dns.TypeA, dns.RcodeSuccess, []string{"10.88.0.21"}},
		{"a <cluster> name of a cluster that does not export the service does not exist", "c3.local-first" + zone, dns.TypeA, dns.RcodeNameError, nil},
		{"nothing ready anywhere: the name exists with no address", "nobody-ready" + zone, dns.TypeA, dns.RcodeSuccess, nil},
		{"only a disconnected cluster exports: no address", "only-disconnected" + zone, dns.TypeA, dns.RcodeSuccess, nil},
		{"the clusterset IP wins over every cluster's", "vip" + zone, dns.TypeA, dns.RcodeSuccess, []string{"10.200.0.1"}},
		{"a <cluster> name of a service with a clusterset IP is the cluster's", "c2.vip" + zone, dns.TypeA, dns.RcodeSuccess, []string{"10.99.0.25"}},
		{"AAAA of a dual-stack service", "dual" + zone, dns.TypeAAAA, dns.RcodeSuccess, []string{"fd00:99::24"}},
		{"A of a dual-stack service", "dual" + zone, dns.TypeA, dns.RcodeSuccess, []string{"10.99.0.24"}},
		{"AAAA of an IPv4-only service: no address", "local-first" + zone, dns.TypeAAAA, dns.RcodeSuccess, nil},

		{"headless: every ready pod of the connected clusters", "whereami-ss" + zone, dns.TypeA, dns.RcodeSuccess, []string{"10.10.0.5", "10.9.0.12", "10.9.0.13"}},
		{"headless <cluster>: that cluster's ready pods", "c2.whereami-ss" + zone, dns.TypeA, dns.RcodeSuccess, []string{"10.9.0.12", "10.9.0.13"}},
		{"headless <cluster> of a disconnected cluster", "c4.whereami-ss" + zone, dns.TypeA, dns.RcodeSuccess, []string{"10.11.0.5"}},
		{"headless <host>.<cluster>: one pod", "whereami-0.c2.whereami-ss" + zone, dns.TypeA, dns.RcodeSuccess, []string{"10.9.0.12"}},
		{"the same hostname in another cluster is another pod", "whereami-0.c3.whereami-ss" + zone, dns.TypeA, dns.RcodeSuccess, []string{"10.10.0.5"}},
		{"a pod that is not ready has no name", "whereami-2.c2.whereami-ss" + zone, dns.TypeA, dns.RcodeNameError, nil},
		{"not-ready pods of a service publishing them", "not-ready-published" + zone, dns.TypeA, dns.RcodeSuccess, []string{"10.9.0.40", "10.9.0.41"}},
		{"a published not-ready pod has its name", "b.c2.not-ready-published" + zone, dns.TypeA, dns.RcodeSuccess, []string{"10.9.0.41"}},
		{"AAAA of a headless service's IPv6 pods", "pods6" + zone, dns.TypeAAAA, dns.RcodeSuccess, []string{"fd00:9::10"}},
		{"AAAA of one pod", "p-0.c2.pods6" + zone, dns.TypeAAAA, dns.RcodeSuccess, []string{"fd00:9::10"}},
		{"A of a dual-stack pod", "p-0.c2.pods6" + zone, dns.TypeA, dns.RcodeSuccess, []string{"10.9.0.30"}},

		{"an unknown service", "nope" + zone, dns.TypeA, dns.RcodeNameError, nil},
		{"an unknown namespace", "whereami-cs.nope.svc.clusterset.local.", dns.TypeA, dns.RcodeNameError, nil},
		{"a namespace with services exists", "sample.svc.clusterset.local.", dns.TypeA, dns.RcodeSuccess, nil},
		{"svc exists", "svc.clusterset.local.", dns.TypeA, dns.RcodeSuccess, nil},
		{"the zone apex exists", "clusterset.local.", dns.TypeA, dns.RcodeSuccess, nil},
		{"something else under the zone", "pod.clusterset.local.", dns.TypeA, dns.RcodeNameError, nil},
		{"a name not ending in svc", "whereami-cs.sample.pod.clusterset.local.", dns.TypeA, dns.RcodeNameError, nil},
		{"too many labels", "a.b.c.d.whereami-cs" + zone, dns.TypeA, dns.RcodeNameError, nil},
		{"an unknown host", "whereami-9.c2.whereami-ss" + zone, dns.TypeA, dns.RcodeNameError, nil},
		{"a host label on a ClusterSetIP service", "x.c2.whereami-cs" + zone, dns.TypeA, dns.RcodeNameError, nil},
		{"an SRV name holds no address", "_http._tcp.whereami-cs" + zone, dns.TypeA, dns.RcodeSuccess, nil},
		{"a TXT of a service: none, the name exists", "whereami-cs" + zone, dns.TypeTXT, dns.RcodeSuccess, nil},
		{"names are case-insensitive", "WhereAmI-CS.Sample.SVC.ClusterSet.Local.", dns.TypeA, dns.RcodeSuccess, nil},
		{"an escaped dot is not a label boundary", `whereami-cs\.sample.svc.clusterset.local.`, dns.TypeA, dns.RcodeNameError, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := ask(t, s, tc.qname, tc.qtype, qopt{})
			if m.Rcode != tc.rcode {
				t.Fatalf("%s %s: rcode %s, want %s", tc.qname, dns.TypeToString[tc.qtype], dns.RcodeToString[m.Rcode], dns.RcodeToString[tc.rcode])
			}
			if !m.Authoritative {
				t.Error("the answer is not authoritative")
			}
			got := addrs(m.Answer)
			if tc.want != nil && !equal(got, tc.want) {
				t.Errorf("%s: %v, want %v", tc.qname, got, tc.want)
			}
			if tc.want == nil && tc.name != "names are case-insensitive" && len(m.Answer) != 0 {
				t.Errorf("%s: answers %v, want none", tc.qname, m.Answer)
			}
			if len(m.Answer) == 0 {
				soa, ok := onlySOA(m.Ns)
				if !ok || soa.Minttl != 5 || soa.Hdr.Name != "clusterset.local." {
					t.Errorf("a negative answer's authority section is %v, want the zone's SOA with minimum TTL 5", m.Ns)
				}
			}
			for _, rr := range m.Answer {
				if rr.Header().Ttl != 5 {
					t.Errorf("TTL %d, want 5", rr.Header().Ttl)
				}
				if rr.Header().Name != tc.qname {
					t.Errorf("record name %q, want the question's %q", rr.Header().Name, tc.qname)
				}
			}
		})
	}
}

func onlySOA(rrs []dns.RR) (*dns.SOA, bool) {
	if len(rrs) != 1 {
		return nil, false
	}
	soa, ok := rrs[0].(*dns.SOA)
	return soa, ok
}

// Round-robin over the clusters that are connected and ready: over many
// queries each gets its share exactly, disconnected ones none.
func TestRoundRobinIsFairAndSkipsDisconnectedClusters(t *testing.T) {
	s := newServer(t, Config{}, tutorial())
	count := func(qtype uint16, n int) map[string]int {
		seen := map[string]int{}
		for range n {
			m := ask(t, s, "whereami-cs"+zone, qtype, qopt{})
			if len(m.Answer) != 1 {
				t.Fatalf("answer %v: want exactly one record", m.Answer)
			}
			seen[addrs(m.Answer)[0]]++
		}
		return seen
	}
	got := count(dns.TypeA, 1000)
	if got["10.99.0.10"] != 500 || got["10.98.0.10"] != 500 || len(got) != 2 {
		t.Errorf("1000 queries went %v; want 500 to c2 (10.99.0.10), 500 to c3 (10.98.0.10), none to c4", got)
	}

	// A client asking for A and AAAA of every name still sees both
	// clusters in turn.
	seen := map[string]int{}
	for range 100 {
		m := ask(t, s, "whereami-cs"+zone, dns.TypeA, qopt{})
		seen[addrs(m.Answer)[0]]++
		if m := ask(t, s, "whereami-cs"+zone, dns.TypeAAAA, qopt{}); len(m.Answer) != 0 {
			t.Fatalf("AAAA of an IPv4 service: %v", m.Answer)
		}
	}
	if seen["10.99.0.10"] != 50 || seen["10.98.0.10"] != 50 {
		t.Errorf("with AAAA queries interleaved, 100 A queries went %v; want 50 and 50", seen)
	}

	// c4 connects: it takes its share; c2 disconnects: it gets none.
	if err := s.Store().SetConnectivity("c1", []string{"c3", "c4"}); err != nil {
		t.Fatal(err)
	}
	got = count(dns.TypeA, 300)
	if got["10.97.0.10"] != 150 || got["10.98.0.10"] != 150 || len(got) != 2 {
		t.Errorf("after c4 connected and c2 disconnected, 300 queries went %v; want 150 each to c3 and c4", got)
	}
	if m := ask(t, s, "whereami-ss"+zone, dns.TypeA, qopt{}); !equal(addrs(m.Answer), []string{"10.10.0.5", "10.11.0.5"}) {
		t.Errorf("headless after the change: %v, want c3's and c4's pods", addrs(m.Answer))
	}
}

// Clients that take the first address of a headless answer spread over
// the pods.
func TestHeadlessAnswersRotate(t *testing.T) {
	s := newServer(t, Config{}, tutorial())
	first := map[string]int{}
	for range 300 {
		m := ask(t, s, "whereami-ss"+zone, dns.TypeA, qopt{})
		if len(m.Answer) != 3 {
			t.Fatalf("answer %v, want 3 pods", m.Answer)
		}
		first[m.Answer[0].(*dns.A).A.String()]++
	}
	for _, a := range []string{"10.9.0.12", "10.9.0.13", "10.10.0.5"} {
		if first[a] != 100 {
			t.Errorf("first addresses over 300 answers: %v; want each pod first 100 times", first)
			break
		}
	}
}

func TestSRV(t *testing.T) {
	s := newServer(t, Config{}, tutorial())
	tests := []struct {
		name, qname string
		rcode       int
		want        []string
		extra       []string
	}{
		{"a port of a ClusterSetIP service points at the service name", "_http._tcp.local-first" + zone, dns.RcodeSuccess,
			[]string{"80 local-first.sample.svc.clusterset.local."}, []string{"10.88.0.20"}},
		{"a port with a cluster label points at the cluster's name", "_http._tcp.c2.whereami-cs" + zone, dns.RcodeSuccess,
			[]string{"80 c2.whereami-cs.sample.svc.clusterset.local."}, []string{"10.99.0.10"}},
		{"the service name lists every port", "multiport" + zone, dns.RcodeSuccess,
			[]string{"53 multiport.sample.svc.clusterset.local.", "80 multiport.sample.svc.clusterset.local.", "9090 multiport.sample.svc.clusterset.local."}, nil},
		{"a UDP port by name", "_dns._udp.multiport" + zone, dns.RcodeSuccess, []string{"53 multiport.sample.svc.clusterset.local."}, nil},
		{"the cluster name lists the cluster's ports", "c2.local-first" + zone, dns.RcodeSuccess,
			[]string{"80 c2.local-first.sample.svc.clusterset.local."}, []string{"10.99.0.20"}},
		{"headless: a record per ready pod with a hostname, in every connected cluster", "_http._tcp.whereami-ss" + zone, dns.RcodeSuccess,
			[]string{"80 whereami-0.c2.whereami-ss.sample.svc.clusterset.local.", "80 whereami-0.c3.whereami-ss.sample.svc.clusterset.local.", "80 whereami-1.c2.whereami-ss.sample.svc.clusterset.local."},
			[]string{"10.10.0.5", "10.9.0.12", "10.9.0.13"}},
		{"headless with a cluster label: that cluster's pods", "_http._tcp.c3.whereami-ss" + zone, dns.RcodeSuccess,
			[]string{"80 whereami-0.c3.whereami-ss.sample.svc.clusterset.local."}, []string{"10.10.0.5"}},
		{"an unknown port does not exist", "_https._tcp.whereami-cs" + zone, dns.RcodeNameError, nil, nil},
		{"a port of the wrong protocol does not exist", "_http._udp.whereami-cs" + zone, dns.RcodeNameError, nil, nil},
		{"an unnamed port has no SRV name", "_._tcp.multiport" + zone, dns.RcodeNameError, nil, nil},
		{"_<proto> is an empty non-terminal", "_tcp.whereami-cs" + zone, dns.RcodeSuccess, nil, nil},
		{"_<proto>.<cluster> is an empty non-terminal", "_tcp.c2.whereami-ss" + zone, dns.RcodeSuccess, nil, nil},
		{"nothing ready: no records", "_http._tcp.nobody-ready" + zone, dns.RcodeSuccess, nil, nil},
		{"a pod's name has no SRV records", "whereami-0.c2.whereami-ss" + zone, dns.RcodeSuccess, nil, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := ask(t, s, tc.qname, dns.TypeSRV, qopt{edns: 4096})
			if m.Rcode != tc.rcode {
				t.Fatalf("rcode %s, want %s", dns.RcodeToString[m.Rcode], dns.RcodeToString[tc.rcode])
			}
			if got := srvs(m.Answer); !equal(got, tc.want) {
				t.Errorf("SRV %v, want %v", got, tc.want)
			}
			for _, rr := range m.Answer {
				if srv := rr.(*dns.SRV); srv.Priority != 0 || srv.Weight != 50 || srv.Hdr.Ttl != 5 {
					t.Errorf("%v: want priority 0, weight 50 (Lighthouse's), TTL 5", srv)
				}
			}
			if tc.extra != nil {
				if got := addrs(m.Extra); !equal(got, tc.extra) {
					t.Errorf("additional addresses %v, want %v", got, tc.extra)
				}
			}
		})
	}
}

func TestVersionTXT(t *testing.T) {
	s := newServer(t, Config{Zones: []string{"clusterset.local", "Example.Org"}}, tutorial())
	for _, z := range []string{"clusterset.local.", "example.org."} {
		m := ask(t, s, "dns-version."+z, dns.TypeTXT, qopt{})
		if m.Rcode != dns.RcodeSuccess || len(m.Answer) != 1 {
			t.Fatalf("dns-version.%s TXT: %v", z, m)
		}
		if txt := m.Answer[0].(*dns.TXT); len(txt.Txt) != 1 || txt.Txt[0] != "1.0.0" {
			t.Errorf("dns-version.%s: %v, want \"1.0.0\" (MCS DNS specification 2.2)", z, txt.Txt)
		}
		if m := ask(t, s, "dns-version."+z, dns.TypeA, qopt{}); m.Rcode != dns.RcodeSuccess || len(m.Answer) != 0 {
			t.Errorf("dns-version.%s A: %v, want NOERROR with no records", z, m)
		}
	}
	if m := ask(t, s, "_http._tcp.c2.whereami-cs.sample.svc.example.org.", dns.TypeSRV, qopt{}); !equal(srvs(m.Answer), []string{"80 c2.whereami-cs.sample.svc.example.org."}) {
		t.Errorf("SRV in the second zone: %v; want a target in that zone", m.Answer)
	}
}

func TestSOAAtTheApex(t *testing.T) {
	s := newServer(t, Config{}, tutorial())
	m := ask(t, s, "ClusterSet.Local.", dns.TypeSOA, qopt{})
	if m.Rcode != dns.RcodeSuccess || len(m.Answer) != 1 {
		t.Fatalf("SOA: %v", m)
	}
	soa := m.Answer[0].(*dns.SOA)
	if soa.Hdr.Name != "ClusterSet.Local." || soa.Ns != "ns.dns.clusterset.local." || soa.Minttl != 5 || soa.Serial == 0 {
		t.Errorf("SOA %v", soa)
	}
	before := soa.Serial
	if err := s.Store().SetServices(nil); err != nil {
		t.Fatal(err)
	}
	if after := ask(t, s, "clusterset.local.", dns.TypeSOA, qopt{}).Answer[0].(*dns.SOA).Serial; after <= before {
		t.Errorf("serial %d after a change, was %d: it must grow", after, before)
	}
}

func TestRefusedAndNotImplemented(t *testing.T) {
	s := newServer(t, Config{}, tutorial())
	tests := []struct {
		name  string
		qname string
		qtype uint16
		class uint16
		rcode int
	}{
		{"a name outside the zone: not an open resolver", "example.com.", dns.TypeA, 0, dns.RcodeRefused},
		{"the zone's parent", "local.", dns.TypeA, 0, dns.RcodeRefused},
		{"a name that ends like the zone", "notclusterset.local.", dns.TypeA, 0, dns.RcodeRefused},
		{"the zone inside another name", "clusterset.local.example.com.", dns.TypeA, 0, dns.RcodeRefused},
		{"the root", ".", dns.TypeNS, 0, dns.RcodeRefused},
		{"an escaped dot before the zone", `evil\.clusterset.local.`, dns.TypeA, 0, dns.RcodeRefused},
		{"class CHAOS", "whereami-cs" + zone, dns.TypeA, dns.ClassCHAOS, dns.RcodeRefused},
		{"MX", "whereami-cs" + zone, dns.TypeMX, 0, dns.RcodeNotImplemented},
		{"NS at the apex", "clusterset.local.", dns.TypeNS, 0, dns.RcodeNotImplemented},
		{"ANY", "whereami-cs" + zone, dns.TypeANY, 0, dns.RcodeNotImplemented},
		{"PTR", "10.0.99.10.in-addr.arpa.", dns.TypePTR, 0, dns.RcodeRefused},
		{"AXFR", "clusterset.local.", dns.TypeAXFR, 0, dns.RcodeNotImplemented},
		{"CNAME of a service", "whereami-cs" + zone, dns.TypeCNAME, 0, dns.RcodeNotImplemented},
		{"PTR of a pod's name", "whereami-0.c2.whereami-ss" + zone, dns.TypePTR, 0, dns.RcodeNotImplemented},
		{"MX of a name that does not exist: the type is checked first", "nope" + zone, dns.TypeMX, 0, dns.RcodeNotImplemented},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := ask(t, s, tc.qname, tc.qtype, qopt{class: tc.class})
			if m.Rcode != tc.rcode {
				t.Errorf("rcode %s, want %s", dns.RcodeToString[m.Rcode], dns.RcodeToString[tc.rcode])
			}
			if len(m.Answer) != 0 {
				t.Errorf("records %v, want none", m.Answer)
			}
			if tc.rcode == dns.RcodeRefused && m.Authoritative {
				t.Error("a refusal claims authority")
			}
			if tc.rcode == dns.RcodeNotImplemented && !m.Authoritative {
				t.Error("NOTIMP for a type in the zone does not claim authority; Lighthouse's does")
			}
			if tc.rcode == dns.RcodeNotImplemented && len(m.Ns) != 0 {
				t.Errorf("NOTIMP carries %v in its authority section; Lighthouse's carries nothing", m.Ns)
			}
		})
	}

	r := new(dns.Msg)
	r.SetQuestion("whereami-cs"+zone, dns.TypeA)
	r.Opcode = dns.OpcodeNotify
	if m := exchange(t, s, r, false); m.Rcode != dns.RcodeNotImplemented || m.Opcode != dns.OpcodeNotify {
		t.Errorf("NOTIFY: rcode %s opcode %d, want NOTIMP echoing the opcode", dns.RcodeToString[m.Rcode], m.Opcode)
	}
	r = new(dns.Msg)
	r.Id = 7
	if m := exchange(t, s, r, false); m.Rcode != dns.RcodeFormatError {
		t.Errorf("no question: rcode %s, want FORMERR", dns.RcodeToString[m.Rcode])
	}
}

func TestEDNS(t *testing.T) {
	s := newServer(t, Config{}, tutorial())
	m := ask(t, s, "whereami-cs"+zone, dns.TypeA, qopt{edns: 4096})
	opt := m.IsEdns0()
	if opt == nil || opt.UDPSize() != DefaultMaxUDPSize || opt.Version() != 0 {
		t.Errorf("OPT %v: want one echoed, announcing %d bytes", opt, DefaultMaxUDPSize)
	}
	if m := ask(t, s, "whereami-cs"+zone, dns.TypeA, qopt{}); m.IsEdns0() != nil {
		t.Error("an answer to a query without EDNS carries an OPT record")
	}
	if m := ask(t, s, "nope"+zone, dns.TypeA, qopt{edns: 1232}); m.IsEdns0() == nil || m.Rcode != dns.RcodeNameError {
		t.Errorf("NXDOMAIN with EDNS: %v", m)
	}
	if m := ask(t, s, "example.com.", dns.TypeA, qopt{edns: 1232}); m.IsEdns0() == nil || m.Rcode != dns.RcodeRefused {
		t.Errorf("REFUSED with EDNS: %v", m)
	}

	r := new(dns.Msg)
	r.SetQuestion("whereami-cs"+zone, dns.TypeA)
	r.SetEdns0(1232, false)
	r.IsEdns0().SetVersion(1)
	m = exchange(t, s, r, false)
	if m.Rcode != dns.RcodeBadVers || m.IsEdns0() == nil || m.IsEdns0().Version() != 0 || len(m.Answer) != 0 {
		t.Errorf("EDNS version 1: rcode %s, OPT %v; want BADVERS with a version 0 OPT (RFC 6891 6.1.3)", dns.RcodeToString[m.Rcode], m.IsEdns0())
	}
}

// bigHeadless is a headless service with n pods in c2.
func bigHeadless(n int) Service {
	svc := Service{Namespace: "sample", Name: "big", Headless: true, Ports: []Port{{Name: "http", Protocol: "TCP", Port: 80}}}
	e := Export{Cluster: "c2"}
	for i := range n {
		e.Endpoints = append(e.Endpoints, Endpoint{
			Hostname:  fmt.Sprintf("pod-%d", i),
			Addresses: []netip.Addr{netip.AddrFrom4([4]byte{10, 9, byte(i >> 8), byte(i)})},
			Ready:     true,
		})
	}
	svc.Exports = []Export{e}
	return svc
}

func TestTruncation(t *testing.T) {
	st := tutorial()
	st.Services = append(st.Services, bigHeadless(300))
	s := newServer(t, Config{}, st)
	name := "big" + zone
	tests := []struct {
		name      string
		o         qopt
		truncated bool
		maxSize   int
		records   int // -1: fewer than all
	}{
		{"UDP without EDNS: 512 bytes", qopt{}, true, 512, -1},
		{"UDP with EDNS 4096: MaxUDPSize", qopt{edns: 4096}, true, DefaultMaxUDPSize, -1},
		{"UDP with EDNS 800", qopt{edns: 800}, true, 800, -1},
		{"EDNS sizes below 512 count as 512", qopt{edns: 100}, true, 512, -1},
		{"TCP: everything", qopt{tcp: true}, false, dns.MaxMsgSize, 300},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := &recorder{remote: udpClient}
			if tc.o.tcp {
				w.remote = tcpClient
			}
			r := new(dns.Msg)
			r.SetQuestion(name, dns.TypeA)
			if tc.o.edns != 0 {
				r.SetEdns0(tc.o.edns, false)
			}
			s.ServeDNS(w, r)
			if len(w.out) > tc.maxSize {
				t.Errorf("answer of %d bytes, want at most %d", len(w.out), tc.maxSize)
			}
			m := new(dns.Msg)
			if err := m.Unpack(w.out); err != nil {
				t.Fatal(err)
			}
			if m.Truncated != tc.truncated {
				t.Errorf("TC %v, want %v", m.Truncated, tc.truncated)
			}
			if tc.records >= 0 && len(m.Answer) != tc.records {
				t.Errorf("%d records, want %d", len(m.Answer), tc.records)
			}
			if tc.records < 0 && len(m.Answer) >= 300 {
				t.Errorf("%d records in a truncated answer", len(m.Answer))
			}
			if (tc.o.edns != 0) != (m.IsEdns0() != nil) {
				t.Error("the OPT record did not survive truncation")
			}
		})
	}

	// The additional section goes first, without TC: 16 SRV records fit
	// 1232 bytes (SRV targets are never compressed), with their 16
	// addresses they do not.
	st.Services = append(st.Services[:len(st.Services)-1], bigHeadless(16))
	s = newServer(t, Config{}, st)
	m := ask(t, s, "_http._tcp.big"+zone, dns.TypeSRV, qopt{edns: 1232})
	if m.Truncated || len(m.Answer) != 16 || len(m.Extra) != 1 {
		t.Errorf("SRV: TC %v, %d records, %d additional; want 16 records, only the OPT record and no TC (the additional section is optional)", m.Truncated, len(m.Answer), len(m.Extra))
	}
	if m := ask(t, s, "_http._tcp.big"+zone, dns.TypeSRV, qopt{tcp: true}); len(m.Extra) != 16 {
		t.Errorf("SRV over TCP: %d additional records, want the 16 pods' addresses", len(m.Extra))
	}
}

func TestNotReadyUntilFed(t *testing.T) {
	s, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	if m := ask(t, s, "whereami-cs"+zone, dns.TypeA, qopt{}); m.Rcode != dns.RcodeServerFailure {
		t.Errorf("before the store has services: %s, want SERVFAIL (no resolver may cache NXDOMAIN yet)", dns.RcodeToString[m.Rcode])
	}
	if m := ask(t, s, "example.com.", dns.TypeA, qopt{}); m.Rcode != dns.RcodeRefused {
		t.Errorf("out of zone before the store has services: %s, want REFUSED", dns.RcodeToString[m.Rcode])
	}
	if err := s.Store().SetConnectivity("c1", []string{"c2"}); err != nil {
		t.Fatal(err)
	}
	if s.Store().Ready() {
		t.Error("ready with connectivity but no services")
	}
	if err := s.Store().SetServices(tutorial().Services); err != nil {
		t.Fatal(err)
	}
	if m := ask(t, s, "c2.whereami-cs"+zone, dns.TypeA, qopt{}); !equal(addrs(m.Answer), []string{"10.99.0.10"}) {
		t.Errorf("after SetServices: %v", m)
	}
	if m := ask(t, s, "whereami-cs"+zone, dns.TypeA, qopt{}); !equal(addrs(m.Answer), []string{"10.99.0.10"}) {
		t.Errorf("connectivity given before the services is kept: %v, want c2's address", m.Answer)
	}
}

func TestTTL(t *testing.T) {
	s := newServer(t, Config{TTL: 30 * time.Second}, tutorial())
	m := ask(t, s, "whereami-0.c2.whereami-ss"+zone, dns.TypeA, qopt{})
	if len(m.Answer) != 1 || m.Answer[0].Header().Ttl != 30 {
		t.Errorf("TTL: %v, want 30", m.Answer)
	}
	for _, bad := range []Config{{TTL: 1500 * time.Millisecond}, {TTL: -time.Second}, {MaxUDPSize: 100}, {Zones: []string{"a..b"}}, {Zones: []string{"clusterset.local", "x.clusterset.local"}}} {
		if _, err := New(bad); err == nil {
			t.Errorf("New(%+v) accepted", bad)
		}
	}
}

func TestStoreReportsWhatItCannotServe(t *testing.T) {
	s, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	err = s.Store().SetServices([]Service{
		{Namespace: "sample", Name: "ok", Exports: []Export{{Cluster: "c2", IPs: ips("10.0.0.1"), Ready: true}}},
		{Namespace: "sample", Name: "Bad.Name"},
		{Namespace: "sample", Name: "ok"},
		{Namespace: "sample", Name: "bad-cluster", Exports: []Export{{Cluster: "C_2"}}},
	})
	for _, want := range []string{`"Bad.Name"`, "listed twice", `"C_2"`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v lacks %s", err, want)
		}
	}
	if n := s.Store().Services(); n != 2 {
		t.Errorf("%d services served, want the 2 valid ones", n)
	}
}
