package natengine

// Replica is a standby's copy of the active engine's flows, built from
// Records, bounded. It lives outside any Engine, so that the standby's
// rules (none while it is passive) cannot retire it; Engine.Import turns it
// into flows when the standby takes over. Not safe for concurrent use.
type Replica struct {
	flows map[replicaKey]replicaEntry
	max   int
	gen   uint32
	full  uint64
}

// replicaKey names a flow by its egress key, which no two flows share.
type replicaKey struct {
	local, remote [16]byte
	lport, rport  uint16
	proto         uint8
	v6            bool
}

type replicaEntry struct {
	rec Record
	gen uint32 // the resync that last saw it
}

// NewReplica returns a replica of at most max flows (an Engine's
// MaxFlows).
func NewReplica(max int) *Replica {
	return &Replica{flows: map[replicaKey]replicaEntry{}, max: max}
}

func (r *Record) replicaKey() replicaKey {
	k := replicaKey{local: r.Local, remote: r.Remote, lport: r.LPort, rport: r.RPort, proto: r.Proto, v6: r.V6}
	if r.Echo {
		k.rport = r.LPort
	}
	return k
}

// Apply applies one record: OpNew and OpChange store it, OpRemove deletes
// its flow. A new flow beyond the bound is dropped and counted (Full).
func (p *Replica) Apply(r *Record) {
	k := r.replicaKey()
	if r.Op == OpRemove {
		delete(p.flows, k)
		return
	}
	if _, ok := p.flows[k]; !ok && len(p.flows) >= p.max {
		p.full++
		return
	}
	e := replicaEntry{rec: *r, gen: p.gen}
	e.rec.Op = OpNew
	p.flows[k] = e
}

// BeginResync starts a full resync: the flows that EndResync finds not
// applied since are the ones the active no longer has.
func (p *Replica) BeginResync() { p.gen++ }

// EndResync removes the flows not applied since BeginResync.
func (p *Replica) EndResync() {
	for k, e := range p.flows {
		if e.gen != p.gen {
			delete(p.flows, k)
		}
	}
}

// Len returns the number of flows held.
func (p *Replica) Len() int { return len(p.flows) }

// Full returns how many new flows were dropped at the bound.
func (p *Replica) Full() uint64 { return p.full }

// Records returns the flows held, as OpNew records.
func (p *Replica) Records() []Record {
	out := make([]Record, 0, len(p.flows))
	for _, e := range p.flows {
		out = append(out, e.rec)
	}
	return out
}

// Reset forgets every flow.
func (p *Replica) Reset() { clear(p.flows) }
