package dnsd

import (
	"slices"

	"github.com/miekg/dns"
)

// reply is the reusable state of one answer: the message, backing arrays
// for its records, the lower-cased query name and the wire buffer. Replies
// are pooled, so that a query's records and buffers are reused by the next
// one instead of allocated.
type reply struct {
	msg   dns.Msg
	q     [1]dns.Question
	an    []dns.RR
	ex    []dns.RR
	ns    [1]dns.RR
	a     []dns.A
	aaaa  []dns.AAAA
	srv   []dns.SRV
	txt   dns.TXT
	soa   dns.SOA
	opt   dns.OPT
	edns  bool
	name  [256]byte
	wire  []byte
	addrs []*addr // the addresses answered, for the metrics
}

// initialWire is the wire buffer a reply starts with: a UDP answer fits.
const initialWire = 4096

// maxPooledWire bounds the wire buffer a pooled reply keeps: big TCP
// answers are rare, and their buffers go to the garbage collector.
const maxPooledWire = 16 << 10

func newReply() *reply {
	return &reply{wire: make([]byte, initialWire)}
}

// reset readies rp for the answer to r.
func (rp *reply) reset(r *dns.Msg) {
	m := &rp.msg
	*m = dns.Msg{}
	m.Id = r.Id
	m.Response = true
	m.Opcode = r.Opcode
	m.RecursionDesired = r.RecursionDesired
	m.CheckingDisabled = r.CheckingDisabled
	if len(r.Question) > 0 {
		rp.q[0] = r.Question[0]
		m.Question = rp.q[:]
	}
	rp.an, rp.ex = rp.an[:0], rp.ex[:0]
	rp.a, rp.aaaa, rp.srv = rp.a[:0], rp.aaaa[:0], rp.srv[:0]
	rp.addrs = rp.addrs[:0]
	rp.edns = false
	if len(rp.wire) > maxPooledWire {
		rp.wire = make([]byte, initialWire)
	}
}

// grow makes room for n more address records and s more SRV records, so
// that pointers into the arrays stay in them.
func (rp *reply) grow(n4, n6, s int) {
	rp.a = slices.Grow(rp.a, n4)
	rp.aaaa = slices.Grow(rp.aaaa, n6)
	rp.srv = slices.Grow(rp.srv, s)
}

// address appends an A or AAAA record for a to section.
func (rp *reply) address(section []dns.RR, name string, a *addr, ttl uint32) []dns.RR {
	if a.fam == v4 {
		rp.a = append(rp.a, dns.A{Hdr: dns.RR_Header{Name: name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: ttl}, A: a.ip})
		return append(section, &rp.a[len(rp.a)-1])
	}
	rp.aaaa = append(rp.aaaa, dns.AAAA{Hdr: dns.RR_Header{Name: name, Rrtype: dns.TypeAAAA, Class: dns.ClassINET, Ttl: ttl}, AAAA: a.ip})
	return append(section, &rp.aaaa[len(rp.aaaa)-1])
}

func (rp *reply) srvRecord(name, target string, port uint16, ttl uint32) {
	// Lighthouse's priority and weight: every target alike.
	rp.srv = append(rp.srv, dns.SRV{
		Hdr:      dns.RR_Header{Name: name, Rrtype: dns.TypeSRV, Class: dns.ClassINET, Ttl: ttl},
		Priority: 0, Weight: 50, Port: port, Target: target,
	})
	rp.an = append(rp.an, &rp.srv[len(rp.srv)-1])
}

// pack encodes the message to fit size bytes, truncating it (TC set) when
// its answers do not. Compression costs a map per message; it pays only
// when names repeat.
func (rp *reply) pack(size int) ([]byte, error) {
	m := &rp.msg
	opts := 0
	if rp.edns {
		rp.ex = append(rp.ex, &rp.opt)
		opts = 1
	}
	m.Answer, m.Extra = rp.an, rp.ex
	m.Compress = len(m.Answer)+len(m.Ns)+len(m.Extra) > 2
	out, err := m.PackBuffer(rp.wire)
	if err != nil {
		return nil, err
	}
	if len(out) > size && len(rp.ex) > opts {
		// The additional section is optional (RFC 2181 section 9): drop it
		// before cutting answers, and without setting TC.
		m.Extra = rp.ex[len(rp.ex)-opts:]
		if out, err = m.PackBuffer(rp.wire); err != nil {
			return nil, err
		}
	}
	if len(out) > size {
		m.Truncate(size)
		if out, err = m.PackBuffer(rp.wire); err != nil {
			return nil, err
		}
	}
	if cap(out) > cap(rp.wire) {
		rp.wire = out[:cap(out)]
	}
	return out, nil
}
