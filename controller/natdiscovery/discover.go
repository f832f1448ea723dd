package natdiscovery

import (
	"context"
	"net/netip"
)

// Prober asks one address of a remote gateway what source it sees; *Conn
// is one.
type Prober interface {
	Probe(ctx context.Context, to netip.AddrPort, remote string) (netip.AddrPort, error)
}

// Target is a remote gateway as its Endpoint publishes it.
type Target struct {
	Cluster string
	// Public is invalid when the remote publishes none.
	Private, Public netip.Addr
	// Port is the remote's discovery port.
	Port uint16
}

// Result is what discovery found out about a Target.
type Result struct {
	// Addr is the remote's address to use; invalid when neither answered.
	Addr netip.Addr
	// NAT says Addr is the remote's public address, across a NAT.
	NAT bool
	// Seen is the source the remote saw this gateway's request come from.
	Seen netip.AddrPort
}

// Discover probes t's private and public addresses at once until ctx ends.
// The private address wins if it answers at all, as Submariner's discovery
// prefers it; so a public answer waits for the private probe to give up.
func Discover(ctx context.Context, p Prober, t Target) Result {
	type answer struct {
		public bool
		seen   netip.AddrPort
		err    error
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	addrs := []netip.Addr{t.Private}
	if t.Public.IsValid() && t.Public != t.Private {
		addrs = append(addrs, t.Public)
	}
	answers := make(chan answer, len(addrs))
	for i, a := range addrs {
		go func() {
			s, err := p.Probe(ctx, netip.AddrPortFrom(a, t.Port), t.Cluster)
			answers <- answer{public: i == 1, seen: s, err: err}
		}()
	}
	var r Result
	for range addrs {
		a := <-answers
		switch {
		case a.err != nil:
		case !a.public:
			return Result{Addr: t.Private, Seen: a.seen}
		default:
			r = Result{Addr: t.Public, NAT: true, Seen: a.seen}
		}
	}
	return r
}
