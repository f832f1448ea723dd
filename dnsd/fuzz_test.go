package dnsd

import (
	"testing"

	"github.com/miekg/dns"
)

// FuzzServeDNS feeds the handler any message that parses, as the server
// would (and some it would reject before the handler: several questions,
// the QR bit): the handler must answer exactly once, with a message that
// parses, carries the query's id, fits the transport's size and names
// only the question in its answers.
func FuzzServeDNS(f *testing.F) {
	for _, q := range []struct {
		name  string
		qtype uint16
	}{
		{"whereami-cs.sample.svc.clusterset.local.", dns.TypeA},
		{"c2.whereami-cs.sample.svc.clusterset.local.", dns.TypeAAAA},
		{"whereami-0.c2.whereami-ss.sample.svc.clusterset.local.", dns.TypeA},
		{"_http._tcp.c2.whereami-ss.sample.svc.clusterset.local.", dns.TypeSRV},
		{"big.sample.svc.clusterset.local.", dns.TypeA},
		{"dns-version.clusterset.local.", dns.TypeTXT},
		{"clusterset.local.", dns.TypeSOA},
		{`a\.b.clusterset.local.`, dns.TypeA},
		{"example.com.", dns.TypeMX},
	} {
		for _, edns := range []bool{false, true} {
			b, err := query(q.name, q.qtype, edns).Pack()
			if err != nil {
				f.Fatal(err)
			}
			f.Add(b)
		}
	}
	st := tutorial()
	st.Services = append(st.Services, bigHeadless(100))
	s := newServer(f, Config{}, st)
	f.Fuzz(func(t *testing.T, data []byte) {
		r := new(dns.Msg)
		if r.Unpack(data) != nil {
			return
		}
		for _, tcp := range []bool{false, true} {
			w := &recorder{remote: udpClient}
			limit := dns.MinMsgSize
			if opt := r.IsEdns0(); opt != nil && opt.Version() == 0 {
				limit = min(max(int(opt.UDPSize()), dns.MinMsgSize), DefaultMaxUDPSize)
			}
			if tcp {
				w.remote, limit = tcpClient, dns.MaxMsgSize
			}
			s.ServeDNS(w, r)
			if w.writes != 1 {
				t.Fatalf("%d writes, want 1", w.writes)
			}
			if len(w.out) > limit {
				t.Fatalf("answer of %d bytes over a transport of %d", len(w.out), limit)
			}
			m := new(dns.Msg)
			if err := m.Unpack(w.out); err != nil {
				t.Fatalf("the answer does not parse: %v", err)
			}
			if m.Id != r.Id || !m.Response {
				t.Fatalf("answer id %d, QR %v; want %d and QR", m.Id, m.Response, r.Id)
			}
			for _, rr := range m.Answer {
				if len(r.Question) == 0 || rr.Header().Name != r.Question[0].Name {
					t.Fatalf("answer record %v does not answer the question %v", rr, r.Question)
				}
			}
		}
	})
}
