package natengine

import "sync/atomic"

// DropReason says why Egress or Ingress refused a packet. The names returned
// by String are stable and meant for metric labels.
type DropReason uint8

// Drop reasons. New reasons are added at the end so that NumDropReasons can
// size per-reason counter arrays.
const (
	// DropMalformed: the packet cannot be translated as it stands: an ICMP
	// error whose quote does not decode or whose checksum is wrong, or a
	// fragmented ICMP error.
	DropMalformed DropReason = iota
	// DropNoRule: no address to translate to: an ingress packet for a
	// global IP that has neither a flow nor an ingress rule, or an egress
	// packet from a pod that no pool, headless rule or cluster pool covers.
	DropNoRule
	// DropNoFlow: a packet that matches no flow and may not start one: a TCP
	// RST, an echo reply, an ICMP error, an ICMP message other than echo.
	DropNoFlow
	// DropPoolExhausted: the global IP chosen for a new flow has no free
	// port (or echo identifier) towards its destination.
	DropPoolExhausted
	// DropTableFull: the table is at MaxFlows and holds nothing expired, no
	// flow that never saw a reply, and no flow a fair share lets go
	// (Engine.fairShare).
	DropTableFull
	// DropConflict: a new inbound flow would reuse the local tuple of a
	// flow the local side started itself.
	DropConflict
	// DropFragmentUnknown: a non-first fragment whose first fragment was
	// not seen and whose translation the rules cannot tell alone.
	DropFragmentUnknown
	// DropSourceLimit: a new flow's source (a local address, or a remote
	// cluster for inbound flows) already holds MaxFlowsPerSource flows.
	DropSourceLimit

	numDropReasons
)

// NumDropReasons is the number of DropReason values.
const NumDropReasons = int(numDropReasons)

var dropReasonNames = [NumDropReasons]string{
	DropMalformed:       "malformed",
	DropNoRule:          "no_rule",
	DropNoFlow:          "no_flow",
	DropPoolExhausted:   "pool_exhausted",
	DropTableFull:       "table_full",
	DropConflict:        "conflict",
	DropFragmentUnknown: "fragment_unknown",
	DropSourceLimit:     "source_limit",
}

// String returns the snake_case name of r, or "unknown".
func (r DropReason) String() string {
	if int(r) < len(dropReasonNames) {
		return dropReasonNames[r]
	}
	return "unknown"
}

// EvictReason says why state was removed before its time to make room for
// new state. The names returned by String are stable and meant for metric
// labels.
type EvictReason uint8

// Eviction reasons, added at the end like drop reasons.
const (
	// EvictUnreplied: a flow that never saw a reply, the oldest, for a new
	// flow in a full table.
	EvictUnreplied EvictReason = iota
	// EvictFairShare: a flow, not an established TCP connection, of a
	// source holding at least two more flows than the new flow's, for that
	// flow in a full table.
	EvictFairShare
	// EvictFragmentSourceLimit: a source's oldest pending first fragment,
	// for its new one, as it held MaxFragmentsPerSource.
	EvictFragmentSourceLimit
	// EvictFragmentTableFull: the oldest pending first fragment, for a new
	// one, as the table held MaxFragments.
	EvictFragmentTableFull

	numEvictReasons
)

// NumEvictReasons is the number of EvictReason values.
const NumEvictReasons = int(numEvictReasons)

var evictReasonNames = [NumEvictReasons]string{
	EvictUnreplied:           "unreplied",
	EvictFairShare:           "fair_share",
	EvictFragmentSourceLimit: "fragment_source_limit",
	EvictFragmentTableFull:   "fragment_table_full",
}

// String returns the snake_case name of r, or "unknown".
func (r EvictReason) String() string {
	if int(r) < len(evictReasonNames) {
		return evictReasonNames[r]
	}
	return "unknown"
}

// Stats are the engine's counters since New. Counters only grow; Flows and
// Fragments are current sizes.
type Stats struct {
	Flows     int    // live flows
	Fragments int    // pending first-fragment mappings
	NewFlows  uint64 // flows created
	Expired   uint64 // flows removed after their idle timeout
	Evicted   uint64 // flows removed to make room: Evictions' flow reasons
	Retired   uint64 // flows removed by SetRules because their rule went
	Drops     [NumDropReasons]uint64
	// Evictions counts flows and pending first fragments removed to make
	// room, by reason.
	Evictions [NumEvictReasons]uint64
}

// counters are updated with atomics: drops happen on every goroutine that
// translates, and Stats reads them from any other.
type counters struct {
	newFlows  atomic.Uint64
	expired   atomic.Uint64
	retired   atomic.Uint64
	drops     [NumDropReasons]atomic.Uint64
	evictions [NumEvictReasons]atomic.Uint64
}

// drop counts a refused packet and returns false, the verdict for the
// gateway.
func (e *Engine) drop(r DropReason) bool {
	e.stats.drops[r].Add(1)
	return false
}

// Stats returns the engine's counters. It first removes the flows that have
// expired, so that Flows and Expired are current.
func (e *Engine) Stats() Stats {
	e.reapAll()
	s := Stats{
		Flows:     int(e.live.Load()),
		Fragments: e.frags.len(),
		NewFlows:  e.stats.newFlows.Load(),
		Expired:   e.stats.expired.Load(),
		Retired:   e.stats.retired.Load(),
	}
	for i := range s.Drops {
		s.Drops[i] = e.stats.drops[i].Load()
	}
	for i := range s.Evictions {
		s.Evictions[i] = e.stats.evictions[i].Load()
	}
	s.Evicted = s.Evictions[EvictUnreplied] + s.Evictions[EvictFairShare]
	return s
}
