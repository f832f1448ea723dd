package natengine

// Port allocation for new egress flows. A flow's mapping must be unique on
// its reply tuple (remote, rport, global, gport), which lets one global
// address and port serve many destinations at once: a pool of a few global
// IPs then carries far more TCP connections and echo sessions than it has
// ports. That is an address-and-port-dependent mapping; RFC 5382, REQ-1 asks
// an endpoint-independent one for TCP, which only peer-to-peer hole punching
// needs. UDP gets the endpoint-independent mapping of RFC 4787, REQ-1: while
// a local address and port has flows, every one of them uses the same global
// address and port, which no other local endpoint may take.

const (
	// The local port is kept when free (RFC 4787, REQ-3 recommends port
	// preservation where possible); otherwise candidates are drawn at
	// random from the unprivileged range, as RFC 6056 advises for ephemeral
	// ports, and the search gives up after portTries draws.
	portFirst = 1024
	portCount = 65536 - portFirst
	portTries = 64
)

// endpoint is an address and port.
type endpoint struct {
	addr [16]byte
	port uint16
}

// binding is a UDP endpoint-independent mapping, held by its flows.
type binding struct {
	global endpoint
	refs   uint32
}

// bindings are the UDP mappings by local and by global endpoint. Under
// Engine.mu.
type bindings struct {
	byLocal  map[endpoint]binding
	byGlobal map[endpoint]endpoint
}

func newBindings() *bindings {
	return &bindings{byLocal: map[endpoint]binding{}, byGlobal: map[endpoint]endpoint{}}
}

func (b *bindings) hold(local, global endpoint) {
	m := b.byLocal[local]
	if m.refs == 0 {
		m.global = global
		b.byGlobal[global] = local
	}
	m.refs++
	b.byLocal[local] = m
}

func (b *bindings) release(local endpoint) {
	m, ok := b.byLocal[local]
	if !ok {
		return
	}
	if m.refs--; m.refs == 0 {
		delete(b.byLocal, local)
		delete(b.byGlobal, m.global)
		return
	}
	b.byLocal[local] = m
}

// allocPort returns the global port for new egress flow f (local, lport,
// remote, rport and proto set; global chosen), or false when the search
// found none free. A UDP flow whose local endpoint has a mapping takes the
// mapping's global address too. Under Engine.mu.
func (e *Engine) allocPort(f *flow) (uint16, bool) {
	switch {
	case f.proto == protoUDP:
		if m, ok := e.binds.byLocal[endpoint{f.local, f.lport}]; ok {
			f.global = m.global.addr
			return m.global.port, e.replyFree(f, m.global.port)
		}
	case f.proto != protoTCP && !f.echo():
		// No ports: the reply tuple is unique only while one local
		// address talks to the remote through this global address.
		return 0, e.replyFree(f, 0)
	}
	if e.portFree(f, f.lport) {
		return f.lport, true
	}
	for range portTries {
		p := uint16(portFirst + e.rand()%portCount)
		if e.portFree(f, p) {
			return p, true
		}
	}
	return 0, false
}

func (e *Engine) portFree(f *flow, p uint16) bool {
	if f.proto == protoUDP {
		if _, used := e.binds.byGlobal[endpoint{f.global, p}]; used {
			return false
		}
	}
	return e.replyFree(f, p)
}

// replyFree reports whether no flow has the reply tuple f would have with
// global port p.
func (e *Engine) replyFree(f *flow, p uint16) bool {
	k := key{a: f.remote, ap: f.rport, b: f.global, bp: p, proto: f.proto, v6: f.kind&kindV6 != 0}
	if f.echo() {
		k.ap = p
	}
	i, _ := e.t.find(&k)
	return i == 0
}
