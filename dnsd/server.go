package dnsd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"
)

// Defaults of Config.
const (
	DefaultZone = "clusterset.local"
	DefaultTTL  = 5 * time.Second
	// DefaultMaxUDPSize is the largest UDP answer: the DNS Flag Day 2020
	// size, which no path fragments. Bigger answers are truncated and the
	// client asks again over TCP.
	DefaultMaxUDPSize = 1232
)

// SchemaVersion is the MCS DNS specification version dnsd implements,
// the TXT record of dns-version.<zone>.
const SchemaVersion = "1.0.0"

// Config configures a Server.
type Config struct {
	// Zones are the zones served; default DefaultZone. Queries for other
	// names are refused.
	Zones []string
	// TTL of every record, whole seconds; default DefaultTTL.
	TTL time.Duration
	// MaxUDPSize bounds answers over UDP to EDNS clients (at least 512);
	// default DefaultMaxUDPSize.
	MaxUDPSize int
	// Registerer receives the metrics; nil keeps them unregistered.
	Registerer prometheus.Registerer
	// Logger receives the server's logs; default slog.Default().
	Logger *slog.Logger
}

// Server answers DNS queries for the clusterset zones from its Store. It
// is a dns.Handler; Serve and ListenAndServe run it on UDP and TCP.
type Server struct {
	zones      []string // lower-case FQDNs
	soa        []dns.SOA
	ttl        uint32
	maxUDPSize int
	store      *Store
	metrics    *metrics
	log        *slog.Logger
	pool       sync.Pool
}

// New makes a Server with an empty Store.
func New(cfg Config) (*Server, error) {
	if len(cfg.Zones) == 0 {
		cfg.Zones = []string{DefaultZone}
	}
	if cfg.TTL == 0 {
		cfg.TTL = DefaultTTL
	}
	if cfg.MaxUDPSize == 0 {
		cfg.MaxUDPSize = DefaultMaxUDPSize
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	var errs []error
	if cfg.TTL < time.Second || cfg.TTL%time.Second != 0 || cfg.TTL > 24*time.Hour {
		errs = append(errs, fmt.Errorf("dnsd: TTL %s: use whole seconds from 1s to 24h, e.g. 5s", cfg.TTL))
	}
	if cfg.MaxUDPSize < dns.MinMsgSize || cfg.MaxUDPSize > dns.MaxMsgSize {
		errs = append(errs, fmt.Errorf("dnsd: MaxUDPSize %d: use %d to %d bytes", cfg.MaxUDPSize, dns.MinMsgSize, dns.MaxMsgSize))
	}
	s := &Server{
		ttl:        uint32(cfg.TTL / time.Second),
		maxUDPSize: cfg.MaxUDPSize,
		log:        cfg.Logger,
	}
	for _, z := range cfg.Zones {
		fq := dns.Fqdn(strings.ToLower(strings.TrimSpace(z)))
		if _, ok := dns.IsDomainName(fq); !ok || fq == "." || strings.ContainsRune(fq, '\\') {
			errs = append(errs, fmt.Errorf("dnsd: zone %q is not a domain name; use e.g. %s", z, DefaultZone))
			continue
		}
		for _, prev := range s.zones {
			if dns.IsSubDomain(prev, fq) || dns.IsSubDomain(fq, prev) {
				errs = append(errs, fmt.Errorf("dnsd: zones %q and %q overlap; serve only one of them", prev, fq))
			}
		}
		s.zones = append(s.zones, fq)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	for _, z := range s.zones {
		s.soa = append(s.soa, dns.SOA{
			Hdr:     dns.RR_Header{Name: z, Rrtype: dns.TypeSOA, Class: dns.ClassINET, Ttl: s.ttl},
			Ns:      "ns.dns." + z,
			Mbox:    "hostmaster." + z,
			Refresh: 7200,
			Retry:   1800,
			Expire:  86400,
			// The negative-caching TTL (RFC 2308): a missing name may appear
			// any moment, like a record may change.
			Minttl: s.ttl,
		})
	}
	s.store = newStore(s.zones)
	s.metrics = newMetrics(cfg.Registerer, s.store)
	s.pool.New = func() any { return newReply() }
	return s, nil
}

// Store is what the server answers from; feed it with Set, SetServices
// and SetConnectivity.
func (s *Server) Store() *Store { return s.store }

// Zones are the zones served, as lower-case FQDNs.
func (s *Server) Zones() []string { return s.zones }

// ServeDNS answers one query; it implements dns.Handler.
func (s *Server) ServeDNS(w dns.ResponseWriter, r *dns.Msg) {
	rp := s.pool.Get().(*reply)
	defer s.pool.Put(rp)
	_, tcp := w.RemoteAddr().(*net.TCPAddr)
	size := s.answer(rp, r, tcp)
	out, err := rp.pack(size)
	if err != nil {
		// Only a record this package built wrong gets here.
		s.log.Error("cannot encode an answer; answering SERVFAIL", "query", r.Question, "error", err)
		rp.reset(r)
		rp.msg.Rcode = dns.RcodeServerFailure
		if out, err = rp.pack(size); err != nil {
			return
		}
	}
	s.metrics.count(rp, r)
	_, _ = w.Write(out)
}

// Serve answers on pc (UDP) and ln (TCP) until ctx ends, then stops
// accepting, lets queries in flight finish for up to five seconds, and
// returns nil. Either may be nil to serve only the other.
func (s *Server) Serve(ctx context.Context, pc net.PacketConn, ln net.Listener) error {
	var servers []*dns.Server
	if pc != nil {
		servers = append(servers, &dns.Server{PacketConn: pc, Handler: s, UDPSize: udpReadSize})
	}
	if ln != nil {
		servers = append(servers, &dns.Server{Listener: ln, Handler: s})
	}
	if len(servers) == 0 {
		return errors.New("dnsd: Serve needs a packet conn, a listener or both")
	}
	errc := make(chan error, len(servers))
	for _, srv := range servers {
		started := make(chan struct{})
		srv.NotifyStartedFunc = func() { close(started) }
		go func() { errc <- srv.ActivateAndServe() }()
		select {
		case <-started:
		case err := <-errc:
			for _, other := range servers {
				if other != srv {
					_ = other.Shutdown()
				}
			}
			return fmt.Errorf("dnsd: %w", err)
		}
	}
	var err error
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, srv := range servers {
		_ = srv.ShutdownContext(shutdown)
	}
	if err != nil {
		return fmt.Errorf("dnsd: %w", err)
	}
	return nil
}

// udpReadSize is the buffer a UDP query is read into: queries are small,
// but EDNS options and padding can take them past 512 bytes.
const udpReadSize = 4096

// ListenAndServe listens on addr ("host:port"), UDP and TCP, and serves
// until ctx ends.
func (s *Server) ListenAndServe(ctx context.Context, addr string) error {
	pc, err := net.ListenPacket("udp", addr)
	if err != nil {
		return fmt.Errorf("dnsd: listen on udp %s: %w", addr, err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		pc.Close()
		return fmt.Errorf("dnsd: listen on tcp %s: %w", addr, err)
	}
	s.log.Info("serving", "address", addr, "zones", s.zones, "ttl", s.ttl)
	return s.Serve(ctx, pc, ln)
}
