package dnsd

import (
	"testing"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"
)

// discard is a ResponseWriter that drops the answer, for allocation
// counts and benchmarks.
type discard struct{ recorder }

func (w *discard) Write(b []byte) (int, error) { return len(b), nil }

func query(name string, qtype uint16, edns bool) *dns.Msg {
	r := new(dns.Msg)
	r.SetQuestion(name, qtype)
	if edns {
		r.SetEdns0(1232, false)
	}
	return r
}

// The handler's part of a query allocates nothing: records, buffers and
// the lower-cased name come from a pooled reply, names are looked up by
// the query's bytes, and the metrics' children are cached in the table.
// Only answers whose names repeat (many pods, SRV with its targets) are
// compressed, which costs github.com/miekg/dns a map.
func TestAnswerAllocatesNothing(t *testing.T) {
	st := tutorial()
	st.Services = append(st.Services, bigHeadless(50))
	s := newServer(t, Config{Registerer: prometheus.NewRegistry()}, st)
	w := &discard{recorder{remote: udpClient}}
	for _, tc := range []struct {
		name  string
		qname string
		qtype uint16
		edns  bool
		want  float64
	}{
		{"ClusterSetIP, round-robin", "whereami-cs" + zone, dns.TypeA, false, 0},
		{"ClusterSetIP, upper case, EDNS", "WhereAmI-CS.Sample.svc.clusterset.local.", dns.TypeA, true, 0},
		{"local cluster", "local-first" + zone, dns.TypeA, true, 0},
		{"one pod", "whereami-0.c2.whereami-ss" + zone, dns.TypeA, false, 0},
		{"headless, 50 pods, compressed", "big" + zone, dns.TypeA, true, 2},
		{"NXDOMAIN", "nope" + zone, dns.TypeA, true, 0},
		{"refused", "example.com.", dns.TypeA, false, 0},
		{"SRV, compressed", "_http._tcp.whereami-cs" + zone, dns.TypeSRV, true, 2},
	} {
		r := query(tc.qname, tc.qtype, tc.edns)
		s.ServeDNS(w, r) // fills the metrics' cache and the pool
		if n := testing.AllocsPerRun(200, func() { s.ServeDNS(w, r) }); n > tc.want {
			t.Errorf("%s: %.1f allocations per query, want %.0f", tc.name, n, tc.want)
		}
	}
}

func BenchmarkServeDNS(b *testing.B) {
	st := tutorial()
	st.Services = append(st.Services, bigHeadless(50))
	s := newServer(b, Config{Registerer: prometheus.NewRegistry()}, st)
	for _, bc := range []struct {
		name  string
		qname string
		qtype uint16
	}{
		{"ClusterSetIP", "whereami-cs" + zone, dns.TypeA},
		{"Pod", "whereami-0.c2.whereami-ss" + zone, dns.TypeA},
		{"Headless50", "big" + zone, dns.TypeA},
		{"SRV", "_http._tcp.whereami-cs" + zone, dns.TypeSRV},
		{"NXDOMAIN", "nope" + zone, dns.TypeA},
	} {
		b.Run(bc.name, func(b *testing.B) {
			r := query(bc.qname, bc.qtype, true)
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				w := &discard{recorder{remote: udpClient}}
				for pb.Next() {
					s.ServeDNS(w, r)
				}
			})
		})
	}
}

// BenchmarkServeDNSWire includes what github.com/miekg/dns does per query
// before and after the handler: unpacking the query, and a response
// writer per query.
func BenchmarkServeDNSWire(b *testing.B) {
	s := newServer(b, Config{Registerer: prometheus.NewRegistry()}, tutorial())
	wire, err := query("whereami-cs"+zone, dns.TypeA, true).Pack()
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.SetBytes(int64(len(wire)))
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			r := new(dns.Msg)
			if err := r.Unpack(wire); err != nil {
				b.Fatal(err)
			}
			s.ServeDNS(&discard{recorder{remote: udpClient}}, r)
		}
	})
}
