package dnsd

import (
	"github.com/miekg/dns"
)

// versionTXT is the dns-version record's text; shared, never written.
var versionTXT = []string{SchemaVersion}

// answer fills rp with the answer to r and returns the size the packed
// answer must fit: 512 bytes over UDP without EDNS, the client's EDNS size
// bounded by MaxUDPSize with it, 64 KiB over TCP.
func (s *Server) answer(rp *reply, r *dns.Msg, tcp bool) int {
	rp.reset(r)
	m := &rp.msg
	size := dns.MinMsgSize
	if tcp {
		size = dns.MaxMsgSize
	}
	if opt := r.IsEdns0(); opt != nil {
		rp.edns = true
		rp.opt = dns.OPT{Hdr: dns.RR_Header{Name: ".", Rrtype: dns.TypeOPT}}
		rp.opt.SetUDPSize(uint16(s.maxUDPSize))
		if opt.Version() != 0 {
			// RFC 6891 section 6.1.3: only version 0 exists.
			m.Rcode = dns.RcodeBadVers
			return size
		}
		if !tcp {
			size = min(max(int(opt.UDPSize()), dns.MinMsgSize), s.maxUDPSize)
		}
	}
	switch {
	case r.Opcode != dns.OpcodeQuery:
		m.Rcode = dns.RcodeNotImplemented
		return size
	case len(r.Question) != 1:
		m.Rcode = dns.RcodeFormatError
		return size
	}
	q := &r.Question[0]
	qn, ok := parseName(q.Name, s.zones, &rp.name)
	if !ok || q.Qclass != dns.ClassINET {
		// Not an open resolver: names outside the zones are someone else's.
		m.Rcode = dns.RcodeRefused
		return size
	}
	t := s.store.table()
	if t == nil {
		m.Rcode = dns.RcodeServerFailure
		return size
	}
	// Lighthouse answers a type it does not serve with NOTIMP, whatever the
	// name, and claims authority for it as for every answer in its zones
	// (coredns/plugin/handler.go, ServeDNS and writeResponse).
	m.Authoritative = true
	switch q.Qtype {
	case dns.TypeA, dns.TypeAAAA, dns.TypeSRV, dns.TypeTXT, dns.TypeSOA:
	default:
		m.Rcode = dns.RcodeNotImplemented
		return size
	}
	if !s.resolve(rp, t, &qn, q) {
		m.Rcode = dns.RcodeNameError
	}
	if len(rp.an) == 0 {
		// A negative answer carries the zone's SOA, whose minimum TTL says
		// how long to cache it (RFC 2308 section 3).
		rp.soa = s.soa[qn.zone]
		rp.soa.Serial = t.serial
		rp.ns[0] = &rp.soa
		m.Ns = rp.ns[:]
	}
	return size
}

// lookup is what a name under a zone is.
type lookup struct {
	svc  *service
	exp  *export   // a <cluster> name, or the cluster of a port name
	host *endpoint // a <host>.<cluster> name
	// port and proto, without their underscores, of an SRV name.
	port, proto []byte
	isPort      bool
}

// resolve adds to rp the records of q's name and type; false when the
// name does not exist. Names that exist without records of the type, or
// with nothing healthy to return, are answered with no records.
func (s *Server) resolve(rp *reply, t *table, qn *qname, q *dns.Question) bool {
	switch {
	case qn.n == 0:
		if q.Qtype == dns.TypeSOA {
			rp.soa = s.soa[qn.zone]
			rp.soa.Hdr.Name = q.Name
			rp.soa.Serial = t.serial
			rp.an = append(rp.an, &rp.soa)
		}
		return true
	case qn.n > maxLabels:
		return false
	case qn.n == 1:
		switch string(qn.label(0)) {
		case "dns-version":
			if q.Qtype == dns.TypeTXT {
				rp.txt = dns.TXT{Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeTXT, Class: dns.ClassINET, Ttl: s.ttl}, Txt: versionTXT}
				rp.an = append(rp.an, &rp.txt)
			}
			return true
		case "svc":
			return true
		}
		return false
	case string(qn.label(qn.n-1)) != "svc":
		return false
	case qn.n == 2:
		_, ok := t.namespaces[string(qn.label(0))]
		return ok
	}
	svc := t.services[string(qn.rel[qn.start[qn.n-3]:qn.end[qn.n-2]])]
	if svc == nil {
		return false
	}
	l, exists, ent := svc.find(qn)
	if !exists {
		return false
	}
	if ent {
		return true
	}
	switch q.Qtype {
	case dns.TypeA:
		s.addresses(rp, q.Name, &l, v4)
	case dns.TypeAAAA:
		s.addresses(rp, q.Name, &l, v6)
	case dns.TypeSRV:
		s.services(rp, q.Name, &l, qn.zone)
	}
	return true
}

// find reads the labels left of "<svc>.<ns>.svc": none, <cluster>,
// <host>.<cluster>, _<port>._<proto>, _<port>._<proto>.<cluster>, or the
// empty non-terminals _<proto> and _<proto>.<cluster> (ent).
func (svc *service) find(qn *qname) (l lookup, exists, ent bool) {
	l.svc = svc
	switch qn.n - 3 {
	case 0:
		return l, true, false
	case 1:
		a := qn.label(0)
		if e := svc.clusters[string(a)]; e != nil {
			l.exp = e
			return l, true, false
		}
		proto, ok := underscored(a)
		return l, ok && hasPort(svc.known, nil, proto), true
	case 2:
		a, b := qn.label(0), qn.label(1)
		if e := svc.clusters[string(b)]; e != nil {
			if h := e.hosts[string(a)]; h != nil {
				l.exp, l.host = e, h
				return l, true, false
			}
			proto, ok := underscored(a)
			return l, ok && hasPort(e.ports, nil, proto), true
		}
		port, ok1 := underscored(a)
		proto, ok2 := underscored(b)
		if !ok1 || !ok2 || !hasPort(svc.known, port, proto) {
			return l, false, false
		}
		l.port, l.proto, l.isPort = port, proto, true
		return l, true, false
	case 3:
		e := svc.clusters[string(qn.label(2))]
		port, ok1 := underscored(qn.label(0))
		proto, ok2 := underscored(qn.label(1))
		if e == nil || !ok1 || !ok2 || !hasPort(e.ports, port, proto) {
			return l, false, false
		}
		l.exp, l.port, l.proto, l.isPort = e, port, proto, true
		return l, true, false
	}
	return l, false, false
}

// underscored strips the underscore of an SRV label such as "_tcp".
func underscored(b []byte) ([]byte, bool) {
	if len(b) < 2 || b[0] != '_' {
		return nil, false
	}
	return b[1:], true
}

// addresses adds the A or AAAA records of a name.
func (s *Server) addresses(rp *reply, name string, l *lookup, f family) {
	svc := l.svc
	var list []*addr
	rotate := false
	switch {
	case l.isPort:
		// _<port>._<proto> names hold SRV records only.
		return
	case l.host != nil:
		n := 0
		for _, a := range l.host.addrs {
			if a.fam == f {
				n++
			}
		}
		s.growFor(rp, f, n)
		for _, a := range l.host.addrs {
			if a.fam == f {
				s.add(rp, name, a)
			}
		}
		return
	case l.exp != nil && svc.headless:
		list = l.exp.byFamily[f]
	case l.exp != nil:
		// A <cluster> name answers with that cluster's address whether or
		// not it is healthy or connected, as Lighthouse does: the client
		// chose the cluster.
		list = l.exp.ips[f]
	case svc.headless:
		list, rotate = svc.published[f], true
	default:
		list = svc.pick(f)
	}
	n := len(list)
	if n == 0 {
		return
	}
	s.growFor(rp, f, n)
	start := 0
	if rotate {
		// Rotate the answer, so that clients taking the first address
		// spread over the pods.
		start = int((svc.next[f].Add(1) - 1) % uint32(n))
	}
	for i := range n {
		s.add(rp, name, list[(start+i)%n])
	}
}

func (s *Server) growFor(rp *reply, f family, n int) {
	if f == v4 {
		rp.grow(n, 0, 0)
	} else {
		rp.grow(0, n, 0)
	}
}

func (s *Server) add(rp *reply, name string, a *addr) {
	rp.an = rp.address(rp.an, name, a, s.ttl)
	rp.addrs = append(rp.addrs, a)
}

// pick is a ClusterSetIP service's address of family f: its clusterset IP,
// else the address of the cluster choose picks.
func (svc *service) pick(f family) []*addr {
	if len(svc.vip[f]) > 0 {
		return svc.vip[f]
	}
	if e := svc.choose(f); e != nil {
		return e.ips[f]
	}
	return nil
}

// choose is the cluster a ClusterSetIP service answers with in family f:
// the local cluster when it exports the service with a ready backend and
// an address of f; else the next connected cluster with both, in turn;
// nil when there is none.
func (svc *service) choose(f family) *export {
	if svc.local != nil && len(svc.local.ips[f]) > 0 {
		return svc.local
	}
	el := svc.eligible[f]
	if len(el) == 0 {
		return nil
	}
	return el[(svc.next[f].Add(1)-1)%uint32(len(el))]
}

// services adds the SRV records of a name, one per port (the port named
// in the name, or every port) and target, with the targets' addresses in
// the additional section.
func (s *Server) services(rp *reply, name string, l *lookup, zone int) {
	svc := l.svc
	if l.host != nil {
		return
	}
	if !svc.headless {
		// A <cluster> name answers with that cluster's ports; a clusterset
		// IP with the ServiceImport's; otherwise the ports every cluster
		// of the first family with a cluster to answer (IPv4, then IPv6)
		// has, as Lighthouse's resolver merges them. The chosen cluster's
		// addresses go in the additional section.
		target, ports, addrs := svc.targets[zone], svc.ports, svc.vip
		switch {
		case l.exp != nil:
			target, ports, addrs = l.exp.targets[zone], l.exp.ports, l.exp.ips
		case len(svc.vip[v4])+len(svc.vip[v6]) == 0:
			e, f := svc.choose(v4), v4
			if e == nil {
				e, f = svc.choose(v6), v6
			}
			if e == nil {
				return
			}
			ports, addrs = svc.merged[f], e.ips
		}
		rp.grow(len(addrs[v4]), len(addrs[v6]), len(ports))
		if s.srvPorts(rp, name, target, ports, l) > 0 {
			for f := range families {
				for _, a := range addrs[f] {
					rp.ex = rp.address(rp.ex, target, a, s.ttl)
					rp.addrs = append(rp.addrs, a)
				}
			}
		}
		return
	}
	eps := svc.pods
	if l.exp != nil {
		eps = l.exp.endpoints
	}
	n4, n6, ns := 0, 0, 0
	for _, ep := range eps {
		for _, a := range ep.addrs {
			if a.fam == v4 {
				n4++
			} else {
				n6++
			}
		}
		ns += len(ep.exp.ports)
	}
	rp.grow(n4, n6, ns)
	for _, ep := range eps {
		if s.srvPorts(rp, name, ep.targets[zone], ep.exp.ports, l) == 0 {
			continue
		}
		for _, a := range ep.addrs {
			rp.ex = rp.address(rp.ex, ep.targets[zone], a, s.ttl)
			rp.addrs = append(rp.addrs, a)
		}
	}
}

// srvPorts adds an SRV record to target for each port the name asks for,
// a port number once; it returns how many.
func (s *Server) srvPorts(rp *reply, name, target string, ports []port, l *lookup) int {
	n := 0
	for i, p := range ports {
		if l.isPort && (p.name != string(l.port) || p.proto != string(l.proto)) {
			continue
		}
		dup := false
		for _, q := range ports[:i] {
			if q.number == p.number && (!l.isPort || (q.name == p.name && q.proto == p.proto)) {
				dup = true
			}
		}
		if dup {
			continue
		}
		rp.srvRecord(name, target, p.number, s.ttl)
		n++
	}
	return n
}
