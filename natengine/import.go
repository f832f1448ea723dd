package natengine

// Import creates the flows of recs (OpNew or OpChange records: a Replica's)
// with their exact addresses, ports, kind and state, as a standby taking
// over. Their timers start afresh; their age carries over. A record is
// skipped when the current rules would not give its translation, when it
// collides with a flow (or UDP mapping) the engine already has, when its
// source is at its share or the table is full, or when it is not a state
// the engine could have made. It returns how many flows were taken and how
// many skipped.
//
// New flows keep away from imported ones as from any other: port search
// avoids every reply tuple in the table and every UDP mapping.
func (e *Engine) Import(recs []Record) (taken, skipped int) {
	now := e.clock()
	e.mu.Lock()
	defer e.mu.Unlock()
	s := e.rules.Load()
	for i := range recs {
		if s != nil && e.importOne(s, &recs[i], now) {
			taken++
		} else {
			skipped++
		}
	}
	return taken, skipped
}

// importOne imports r. Under e.mu.
func (e *Engine) importOne(s *snapshot, r *Record, now uint32) bool {
	if r.Op == OpRemove || !validRecord(r) {
		return false
	}
	c := flow{local: r.Local, global: r.Global, remote: r.Remote, lport: r.LPort, gport: r.GPort, rport: r.RPort, proto: r.Proto}
	if r.V6 {
		c.kind |= kindV6
	}
	if r.Inbound {
		c.kind |= kindInbound
	}
	if r.Echo {
		c.kind |= kindEcho
	}
	if !s.holds(&c) {
		return false
	}
	for dir := uint32(0); dir < 2; dir++ {
		if k := c.key(dir); e.t.has(&k) {
			return false
		}
	}
	udpMapped := c.proto == protoUDP && !r.Inbound
	if udpMapped {
		if m, ok := e.binds.byLocal[endpoint{c.local, c.lport}]; ok && m.global != (endpoint{c.global, c.gport}) {
			return false
		}
		if l, ok := e.binds.byGlobal[endpoint{c.global, c.gport}]; ok && l != (endpoint{c.local, c.lport}) {
			return false
		}
	}
	src := localSource(&c.local)
	if r.Inbound {
		ri := s.remoteIndex(&c.remote)
		if ri < 0 {
			return false
		}
		src = s.remoteSource(ri)
	}
	if e.admit(src, now) != dropNone {
		return false
	}
	c.owner = e.share.hold(src)
	e.place(&c, r.State, now-min(r.Age, now-1), now)
	if udpMapped {
		e.binds.hold(endpoint{c.local, c.lport}, endpoint{c.global, c.gport})
	}
	return true
}

// validRecord reports whether r is a flow the engine could have made: a
// state of its protocol, an echo flow only of ICMP, an inbound flow that
// kept its port, IPv4 addresses in their first four bytes.
func validRecord(r *Record) bool {
	st := r.FlowState()
	if r.State&^stKnown != 0 {
		return false
	}
	if r.Proto == protoTCP {
		if st < StateSynSent || st > StateClosed {
			return false
		}
	} else if st != StateUnreplied && st != StateReplied {
		return false
	}
	if r.Echo {
		want := uint8(protoICMPv4)
		if r.V6 {
			want = protoICMPv6
		}
		if r.Proto != want || r.RPort != 0 {
			return false
		}
	}
	if r.Inbound && r.LPort != r.GPort {
		return false
	}
	if !r.V6 {
		var zero [12]byte
		if [12]byte(r.Local[4:]) != zero || [12]byte(r.Global[4:]) != zero || [12]byte(r.Remote[4:]) != zero {
			return false
		}
	}
	return true
}

// remoteIndex returns the index of the remote whose global CIDR holds a,
// or -1.
func (s *snapshot) remoteIndex(a *[16]byte) int {
	for i := range s.remotes {
		if s.remotes[i].contains(a) {
			return i
		}
	}
	return -1
}
