package natengine

// Fair shares of the engine's tables. A source is whoever chooses the
// packets that create state, as far as the engine can tell them apart:
// for egress the local source address (a pod or a ClusterIP), for ingress
// the remote cluster, not the remote address. The gateway only admits a
// remote's packets whose inner source lies in that remote's CIDRs, so every
// address of its global CIDR is the remote's to choose; counting by address
// would let one cluster take the tables with a /16 of them, while counting
// by cluster bounds it whatever addresses it uses.

// source names a source: a local address with net zero, or a remote
// cluster by its global CIDR with addr zero. A CIDR, unlike the remote's
// index, keeps naming the same cluster when SetRules reorders the remotes.
type source struct {
	addr [16]byte
	net  cidr
}

func localSource(a *[16]byte) source { return source{addr: *a} }

func (s *snapshot) remoteSource(remote int) source { return source{net: s.remotes[remote]} }

// shares counts the flows of each source. A flow holds the id of its
// source's record, so removing a flow finds the count without hashing, and
// a record lives exactly while its source has flows. Under Engine.mu.
type shares struct {
	ids  map[source]uint32
	recs []share // by id; id 0 is never used, so a zero flow.owner is none
	free uint32  // head of the free records, chained through n
}

type share struct {
	src source
	n   uint32
}

func newShares() *shares {
	return &shares{ids: map[source]uint32{}, recs: make([]share, 1)}
}

// count returns the number of flows src holds.
func (s *shares) count(src source) uint32 {
	if id, ok := s.ids[src]; ok {
		return s.recs[id].n
	}
	return 0
}

// hold counts one more flow for src and returns its record's id.
func (s *shares) hold(src source) uint32 {
	id, ok := s.ids[src]
	if !ok {
		if id = s.free; id != 0 {
			s.free = s.recs[id].n
		} else {
			id = uint32(len(s.recs))
			s.recs = append(s.recs, share{})
		}
		s.recs[id] = share{src: src}
		s.ids[src] = id
	}
	s.recs[id].n++
	return id
}

// release counts one flow fewer for the record id.
func (s *shares) release(id uint32) {
	r := &s.recs[id]
	if r.n--; r.n > 0 {
		return
	}
	delete(s.ids, r.src)
	r.n, s.free = s.free, id
}
