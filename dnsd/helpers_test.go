package dnsd

import (
	"net"
	"net/netip"
	"slices"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// settle bounds a wait for a server on loopback to answer or stop, which
// takes milliseconds on an idle machine: go test runs packages in parallel,
// and on a loaded 2-core machine such waits stretch by orders of magnitude.
// Running out fails the test, so it is far beyond the normal time.
const settle = 60 * time.Second

// recorder is a dns.ResponseWriter that keeps what was written.
type recorder struct {
	remote net.Addr
	out    []byte
	writes int
}

var (
	udpClient = &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 40000}
	tcpClient = &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 40000}
	localAddr = &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 53}
)

func (w *recorder) LocalAddr() net.Addr  { return localAddr }
func (w *recorder) RemoteAddr() net.Addr { return w.remote }
func (w *recorder) WriteMsg(m *dns.Msg) error {
	b, err := m.Pack()
	if err != nil {
		return err
	}
	_, err = w.Write(b)
	return err
}
func (w *recorder) Write(b []byte) (int, error) {
	w.out = append(w.out[:0], b...)
	w.writes++
	return len(b), nil
}
func (w *recorder) Close() error        { return nil }
func (w *recorder) TsigStatus() error   { return nil }
func (w *recorder) TsigTimersOnly(bool) {}
func (w *recorder) Hijack()             {}

// query options.
type qopt struct {
	tcp   bool
	edns  uint16 // EDNS UDP size; 0 for none
	class uint16
}

func ask(t testing.TB, s *Server, name string, qtype uint16, o qopt) *dns.Msg {
	t.Helper()
	r := new(dns.Msg)
	r.SetQuestion(name, qtype)
	r.Id = 4242
	if o.class != 0 {
		r.Question[0].Qclass = o.class
	}
	if o.edns != 0 {
		r.SetEdns0(o.edns, false)
	}
	return exchange(t, s, r, o.tcp)
}

func exchange(t testing.TB, s *Server, r *dns.Msg, tcp bool) *dns.Msg {
	t.Helper()
	w := &recorder{remote: udpClient}
	if tcp {
		w.remote = tcpClient
	}
	s.ServeDNS(w, r)
	if w.writes != 1 {
		t.Fatalf("%v: %d writes, want 1", r.Question, w.writes)
	}
	m := new(dns.Msg)
	if err := m.Unpack(w.out); err != nil {
		t.Fatalf("%v: the answer does not parse: %v", r.Question, err)
	}
	if m.Id != r.Id || !m.Response {
		t.Fatalf("%v: answer id %d response %v, want id %d and the QR bit", r.Question, m.Id, m.Response, r.Id)
	}
	return m
}

// addrs lists the A and AAAA addresses of an answer section, sorted.
func addrs(rrs []dns.RR) []string {
	var out []string
	for _, rr := range rrs {
		switch rr := rr.(type) {
		case *dns.A:
			out = append(out, rr.A.String())
		case *dns.AAAA:
			out = append(out, rr.AAAA.String())
		}
	}
	sort.Strings(out)
	return out
}

// srvs lists an answer's SRV records as "port target", sorted.
func srvs(rrs []dns.RR) []string {
	var out []string
	for _, rr := range rrs {
		if s, ok := rr.(*dns.SRV); ok {
			out = append(out, strconv.Itoa(int(s.Port))+" "+s.Target)
		}
	}
	sort.Strings(out)
	return out
}

func ips(s ...string) []netip.Addr {
	out := make([]netip.Addr, len(s))
	for i, a := range s {
		out[i] = netip.MustParseAddr(a)
	}
	return out
}

func equal(a, b []string) bool { return slices.Equal(a, b) }

// tutorial is the Submariner tutorial's clusterset as c1's dnsd sees it:
// c2 and c3 connected, c4 exporting but disconnected.
func tutorial() State {
	http := []Port{{Name: "http", Protocol: "TCP", Port: 80}}
	return State{
		LocalCluster: "c1",
		Connected:    []string{"c2", "c3"},
		Services: []Service{
			{Namespace: "sample", Name: "whereami-cs", Ports: http, Exports: []Export{
				{Cluster: "c2", IPs: ips("10.99.0.10"), Ready: true},
				{Cluster: "c3", IPs: ips("10.98.0.10"), Ready: true},
				{Cluster: "c4", IPs: ips("10.97.0.10"), Ready: true},
			}},
			{Namespace: "sample", Name: "whereami-ss", Headless: true, Ports: http, Exports: []Export{
				{Cluster: "c2", Endpoints: []Endpoint{
					{Hostname: "whereami-0", Addresses: ips("10.9.0.12"), Ready: true},
					{Hostname: "whereami-1", Addresses: ips("10.9.0.13"), Ready: true},
					{Hostname: "whereami-2", Addresses: ips("10.9.0.14"), Ready: false},
				}},
				{Cluster: "c3", Endpoints: []Endpoint{
					{Hostname: "whereami-0", Addresses: ips("10.10.0.5"), Ready: true},
				}},
				{Cluster: "c4", Endpoints: []Endpoint{
					{Hostname: "whereami-0", Addresses: ips("10.11.0.5"), Ready: true},
				}},
			}},
			{Namespace: "sample", Name: "local-first", Ports: http, Exports: []Export{
				{Cluster: "c1", IPs: ips("10.88.0.20"), Ready: true},
				{Cluster: "c2", IPs: ips("10.99.0.20"), Ready: true},
			}},
			{Namespace: "sample", Name: "local-unready", Ports: http, Exports: []Export{
				{Cluster: "c1", IPs: ips("10.88.0.21"), Ready: false},
				{Cluster: "c2", IPs: ips("10.99.0.21"), Ready: true},
			}},
			{Namespace: "sample", Name: "nobody-ready", Ports: http, Exports: []Export{
				{Cluster: "c2", IPs: ips("10.99.0.22"), Ready: false},
			}},
			{Namespace: "sample", Name: "only-disconnected", Ports: http, Exports: []Export{
				{Cluster: "c4", IPs: ips("10.97.0.23"), Ready: true},
			}},
			{Namespace: "sample", Name: "dual", Ports: http, Exports: []Export{
				{Cluster: "c2", IPs: ips("10.99.0.24", "fd00:99::24"), Ready: true},
			}},
			{Namespace: "sample", Name: "pods6", Headless: true, Exports: []Export{
				{Cluster: "c2", Endpoints: []Endpoint{
					{Hostname: "p-0", Addresses: ips("fd00:9::10", "10.9.0.30"), Ready: true},
				}},
			}},
			{Namespace: "sample", Name: "not-ready-published", Headless: true, Exports: []Export{
				{Cluster: "c2", PublishNotReady: true, Endpoints: []Endpoint{
					{Hostname: "a", Addresses: ips("10.9.0.40"), Ready: true},
					{Hostname: "b", Addresses: ips("10.9.0.41"), Ready: false},
				}},
			}},
			{Namespace: "sample", Name: "vip", ClusterSetIPs: ips("10.200.0.1"), Ports: http, Exports: []Export{
				{Cluster: "c2", IPs: ips("10.99.0.25"), Ready: true},
			}},
			{Namespace: "sample", Name: "multiport", Ports: []Port{
				{Name: "http", Protocol: "TCP", Port: 80},
				{Name: "dns", Protocol: "UDP", Port: 53},
				{Name: "dns-tcp", Protocol: "TCP", Port: 53},
				{Protocol: "TCP", Port: 9090},
			}, Exports: []Export{
				{Cluster: "c2", IPs: ips("10.99.0.26"), Ready: true},
			}},
		},
	}
}

func newServer(t testing.TB, cfg Config, st State) *Server {
	t.Helper()
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Store().Set(st); err != nil {
		t.Fatal(err)
	}
	return s
}
