package lab

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/miekg/dns"

	"github.com/snorkel-net/snorkel/dnsd"
	"github.com/snorkel-net/snorkel/lab/topo"
)

// The lab's service discovery: `snorkel dnsd` on the first cluster's
// gateway node, serving the clusterset's services under the names
// <svc>.sample.svc.clusterset.local (KubeNamespace): from a static state
// built from the plan, or with --kube fed by the first cluster's API
// server, where the agents import what the others export.
const (
	// DNSPort is the port dnsd answers on, at the first cluster's node IP.
	DNSPort = 53
	// DNSDMetricsAddress is where the lab's dnsd serves /metrics, inside
	// its node's namespace.
	DNSDMetricsAddress = "127.0.0.1:9153"

	dnsdProcess = "dnsd"
	dnsdFile    = "dnsd.json"
)

// DNSServer is the address of the lab's dnsd: the first cluster's node
// IP, which its pods reach directly.
func (p *Plan) DNSServer() netip.AddrPort {
	return netip.AddrPortFrom(p.Clusters[0].Gateway.NodeIP, DNSPort)
}

// DNSState is what the lab's dnsd serves: every cluster's services,
// exported to the clusterset, as the first cluster sees them: every other
// cluster connected, every backend ready. ClusterIP services answer with
// their ClusterIP, or their global IP with Globalnet; headless services
// with their pods, named after them, at their own or global IPs.
func (p *Plan) DNSState() dnsd.State {
	st := dnsd.State{LocalCluster: p.Clusters[0].Spec.ID}
	byName := map[string]int{}
	for _, c := range p.Clusters {
		if c.Spec.ID != st.LocalCluster {
			st.Connected = append(st.Connected, c.Spec.ID)
		}
		for _, s := range c.Services {
			i, ok := byName[s.Spec.Name]
			if !ok {
				i = len(st.Services)
				byName[s.Spec.Name] = i
				svc := dnsd.Service{Namespace: KubeNamespace, Name: s.Spec.Name, Headless: s.Spec.Headless}
				port := s.Spec.Port
				if s.Spec.Headless {
					port = s.Spec.TargetPort
				}
				svc.Ports = []dnsd.Port{{Name: "http", Protocol: "TCP", Port: port}}
				st.Services = append(st.Services, svc)
			}
			st.Services[i].Exports = append(st.Services[i].Exports, serviceExport(c, s))
		}
	}
	return st
}

func serviceExport(c ClusterPlan, s ServicePlan) dnsd.Export {
	e := dnsd.Export{Cluster: c.Spec.ID, Ready: true}
	if !s.Spec.Headless {
		ip := s.Spec.ClusterIP
		if s.GlobalIP.IsValid() {
			ip = s.GlobalIP
		}
		e.IPs = []netip.Addr{ip}
		return e
	}
	for _, b := range s.Backends {
		ip := b.IP
		if b.GlobalIP.IsValid() {
			ip = b.GlobalIP
		}
		e.Endpoints = append(e.Endpoints, dnsd.Endpoint{Hostname: b.Name, Addresses: []netip.Addr{ip}, Ready: true})
	}
	return e
}

// hasDNSD reports whether the lab runs dnsd: this process started it, or
// the lab it attached to records its process.
func (l *Lab) hasDNSD() bool {
	if l.dns {
		return true
	}
	for _, p := range l.Topo.Processes() {
		if p.Name == dnsdProcess {
			return true
		}
	}
	return false
}

// DNSDFile is where the lab writes dnsd's state.
func DNSDFile(stateDir string) string { return filepath.Join(stateDir, dnsdFile) }

// startDNSD starts dnsd on the first cluster's node and waits until it
// answers: a `snorkel dnsd` process, or with in-process pods a server in
// this process, listening inside the node's namespace.
func (l *Lab) startDNSD(ctx context.Context, inProcess bool) error {
	home := &l.Plan.Clusters[0]
	gw := l.Topo.NS(home.Gateway.NS)
	st := l.Plan.DNSState()
	addr := l.Plan.DNSServer().String()
	how := ""
	switch {
	case l.Kube:
		p, err := gw.Start(dnsdProcess, l.Topo.Binary(), "dnsd", "--kubeconfig", KubeconfigFile(l.StateDir, home.Spec.ID),
			"--listen", addr, "--metrics-address", DNSDMetricsAddress)
		if err != nil {
			return err
		}
		how = fmt.Sprintf("snorkel dnsd pid %d, fed by %s's API server", p.PID, home.Spec.ID)
	case inProcess:
		srv, err := dnsd.New(dnsd.Config{})
		if err != nil {
			return err
		}
		if err := srv.Store().Set(st); err != nil {
			return err
		}
		pc, err := gw.ListenPacket("udp", addr)
		if err != nil {
			return fmt.Errorf("lab: dnsd: %w", err)
		}
		ln, err := gw.Listen("tcp", addr)
		if err != nil {
			pc.Close()
			return fmt.Errorf("lab: dnsd: %w", err)
		}
		dctx, cancel := context.WithCancel(context.Background())
		l.stopDNSD = cancel
		l.pods.Go(func() { srv.Serve(dctx, pc, ln) })
		how = "in this process, static state"
	default:
		b, err := dnsd.EncodeState(st)
		if err != nil {
			return err
		}
		file := DNSDFile(l.StateDir)
		if err := os.WriteFile(file, b, 0o644); err != nil {
			return fmt.Errorf("lab: write %s: %w", file, err)
		}
		p, err := gw.Start(dnsdProcess, l.Topo.Binary(), "dnsd", "--static", file, "--listen", addr, "--metrics-address", DNSDMetricsAddress)
		if err != nil {
			return err
		}
		how = fmt.Sprintf("snorkel dnsd pid %d, static state", p.PID)
	}
	// SERVFAIL is dnsd waiting for its feed.
	err := l.waitFor(ctx, dnsdProcess, func() error {
		m, err := lookup(ctx, gw, l.Plan.DNSServer(), "dns-version."+dnsd.DefaultZone+".", dns.TypeTXT)
		if err == nil && m.Rcode != dns.RcodeSuccess {
			err = fmt.Errorf("dns-version TXT: %s", dns.RcodeToString[m.Rcode])
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("lab: dnsd on %s does not answer: %w\n%s", addr, err, logTail(l.Topo.LogPath(dnsdProcess), 10))
	}
	l.step("%s: dnsd on %s (%s): <svc>.%s.svc.%s", home.Spec.ID, addr, how, KubeNamespace, dnsd.DefaultZone)
	return nil
}

// lookup asks the DNS server at server from inside ns.
func lookup(ctx context.Context, ns *topo.NS, server netip.AddrPort, name string, qtype uint16) (*dns.Msg, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	c, err := ns.DialContext(ctx, "udp", server.String())
	if err != nil {
		return nil, err
	}
	defer c.Close()
	if d, ok := ctx.Deadline(); ok {
		c.SetDeadline(d)
	}
	conn := &dns.Conn{Conn: c}
	r := new(dns.Msg)
	r.SetQuestion(dns.Fqdn(name), qtype)
	if err := conn.WriteMsg(r); err != nil {
		return nil, err
	}
	m, err := conn.ReadMsg()
	if err != nil {
		return nil, err
	}
	if m.Id != r.Id {
		return nil, fmt.Errorf("answer with id %d to query %d", m.Id, r.Id)
	}
	return m, nil
}

// dnsDemo resolves the clusterset's names from pod src through the lab's
// dnsd: each service, each ClusterIP service at each cluster, each
// headless pod, and a name that does not exist; then fetches a remote
// ClusterIP service by its name.
func (l *Lab) dnsDemo(ctx context.Context, src PodPlan, report func(Check)) {
	ns := l.Topo.NS(src.NS)
	server := l.Plan.DNSServer()
	zone := KubeNamespace + ".svc." + dnsd.DefaultZone
	st := l.Plan.DNSState()
	for _, svc := range st.Services {
		name := svc.Name + "." + zone
		var want []string
		for _, e := range svc.Exports {
			if svc.Headless {
				for _, ep := range e.Endpoints {
					want = append(want, ep.Addresses[0].String())
					report(l.resolveCheck(ctx, ns, src, server, ep.Hostname+"."+e.Cluster+"."+name, dns.RcodeSuccess, ep.Addresses[0].String()))
				}
				continue
			}
			report(l.resolveCheck(ctx, ns, src, server, e.Cluster+"."+name, dns.RcodeSuccess, e.IPs[0].String()))
		}
		if !svc.Headless {
			// The local cluster's export wins; without one, the only
			// remote exporter answers (the lab's services have one).
			want = []string{svc.Exports[0].IPs[0].String()}
			for _, e := range svc.Exports {
				if e.Cluster == st.LocalCluster {
					want = []string{e.IPs[0].String()}
				}
			}
		}
		report(l.resolveCheck(ctx, ns, src, server, name, dns.RcodeSuccess, want...))
	}
	report(l.resolveCheck(ctx, ns, src, server, "nothing-here."+zone, dns.RcodeNameError))

	// A name is only useful if the address it gives works.
	for _, r := range l.Plan.Remotes(&l.Plan.Clusters[0]) {
		for _, s := range r.Services {
			if s.Spec.Headless {
				continue
			}
			name := s.Spec.Name + "." + zone
			c := Check{Kind: "http", What: arrow(src.Name, fmt.Sprintf("%s:%d", name, s.Spec.Port))}
			m, err := lookup(ctx, ns, server, name, dns.TypeA)
			if err != nil || len(m.Answer) != 1 {
				c.Detail = fmt.Sprintf("cannot resolve %s: %v %v", name, m, err)
				report(c)
				return
			}
			at := netip.MustParseAddr(m.Answer[0].(*dns.A).A.String())
			isBackend := func(p string) bool {
				return slices.ContainsFunc(s.Backends, func(b PodPlan) bool { return b.Name == p })
			}
			url := "http://" + netip.AddrPortFrom(at, s.Spec.Port).String() + "/"
			c, _ = whereamiCheck(ctx, ns.HTTPClient(), c, url, isBackend, clientRule{ok: func(netip.Addr) bool { return true }, want: "any"})
			c.Detail = "resolved to " + at.String() + ", " + c.Detail
			report(c)
			return
		}
	}
}

// resolveCheck asks for name's A records and checks the rcode and the
// addresses (in any order), and that the answer is authoritative. With
// --kube it asks again until the ready timeout: the imports and the
// gateways' connection status reach dnsd after the traffic flows.
func (l *Lab) resolveCheck(ctx context.Context, ns *topo.NS, src PodPlan, server netip.AddrPort, name string, rcode int, want ...string) Check {
	deadline := time.Now().Add(l.readyTimeout)
	for {
		c := l.resolveOnce(ctx, ns, src, server, name, rcode, want...)
		if c.OK || !l.Kube || time.Now().After(deadline) || ctx.Err() != nil {
			return c
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (l *Lab) resolveOnce(ctx context.Context, ns *topo.NS, src PodPlan, server netip.AddrPort, name string, rcode int, want ...string) Check {
	c := Check{Kind: "dns", What: arrow(src.Name, name)}
	m, err := lookup(ctx, ns, server, name, dns.TypeA)
	if err != nil {
		c.Detail = fmt.Sprintf("no answer from %s: %v", server, err)
		return c
	}
	var got []string
	for _, rr := range m.Answer {
		if a, ok := rr.(*dns.A); ok {
			got = append(got, a.A.String())
		}
	}
	slices.Sort(got)
	want = slices.Clone(want)
	slices.Sort(want)
	c.Detail = dns.RcodeToString[m.Rcode]
	if len(got) > 0 {
		c.Detail = strings.Join(got, ", ")
	}
	switch {
	case m.Rcode != rcode:
		c.Detail += "; want " + dns.RcodeToString[rcode]
	case !slices.Equal(got, want):
		c.Detail += "; want " + strings.Join(want, ", ")
	case !m.Authoritative:
		c.Detail += "; the answer is not authoritative"
	default:
		c.OK = true
	}
	return c
}
