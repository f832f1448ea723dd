package natengine

import (
	"net/netip"
	"time"
)

// Tuple is the addresses and ports of a packet. For an ICMP echo flow the
// ports hold the echo identifier.
type Tuple struct {
	Src, Dst netip.AddrPort
}

// Flow describes one tracked flow, for `snorkel show flows`.
type Flow struct {
	// Original is the first packet's tuple as it arrived: from the local
	// side for a flow started by Egress, from the remote for one started
	// by Ingress.
	Original Tuple
	// Reply is the tuple of the replies as they arrive, before the engine
	// translates them.
	Reply Tuple
	// Inbound is set for a flow started by Ingress (through an ingress
	// rule).
	Inbound bool
	Proto   uint8
	State   FlowState
	Age     time.Duration // since the first packet
	Idle    time.Duration // since the last packet (ICMP errors aside)
	// Rule names what gave the flow its global address: an egress pool,
	// ClusterEgressRule, or an ingress rule (also for a headless pod's
	// own egress). It is empty for a flow whose rule has just gone.
	Rule string
}

// Flows returns every live flow, after removing those that have expired. It
// holds the table's structure lock while it copies, so new flows wait.
func (e *Engine) Flows() []Flow {
	now := e.clock()
	e.mu.Lock()
	defer e.mu.Unlock()
	e.reap(now, -1)
	s := e.rules.Load()
	out := make([]Flow, 0, e.live.Load())
	for i := uint32(1); i <= e.t.used; i++ {
		f := e.t.flow(i)
		if !f.linked() {
			continue
		}
		st := f.st()
		fl := Flow{
			Inbound: f.kind&kindInbound != 0,
			Proto:   f.proto,
			State:   FlowState(st & stateMask),
			Age:     time.Duration(now-f.created) * time.Second,
			Idle:    time.Duration(now-f.seen.Load()) * time.Second,
		}
		if s != nil {
			fl.Rule = s.owner[f.global]
		}
		eg, in := f.key(dirEgress), f.key(dirIngress)
		if fl.Inbound {
			fl.Original, fl.Reply = tupleOf(&in), tupleOf(&eg)
		} else {
			fl.Original, fl.Reply = tupleOf(&eg), tupleOf(&in)
		}
		out = append(out, fl)
	}
	return out
}

func tupleOf(k *key) Tuple {
	return Tuple{netip.AddrPortFrom(addrOf(k.a, k.v6), k.ap), netip.AddrPortFrom(addrOf(k.b, k.v6), k.bp)}
}

func addrOf(a [16]byte, v6 bool) netip.Addr {
	if v6 {
		return netip.AddrFrom16(a)
	}
	return netip.AddrFrom4([4]byte(a[:4]))
}
