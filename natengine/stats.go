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
	// DropTableFull: the table is at MaxFlows and holds nothing expired and
	// no flow that never saw a reply.
	DropTableFull
	// DropConflict: a new inbound flow would reuse the local tuple of a
	// flow the local side started itself.
	DropConflict
	// DropFragmentUnknown: a non-first fragment whose first fragment was
	// not seen and whose translation the rules cannot tell alone.
	DropFragmentUnknown
	// DropFragmentsFull: a first fragment found the pending-fragment table
	// at MaxFragments; its followers could not be translated.
	DropFragmentsFull

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
	DropFragmentsFull:   "fragments_full",
}

// String returns the snake_case name of r, or "unknown".
func (r DropReason) String() string {
	if int(r) < len(dropReasonNames) {
		return dropReasonNames[r]
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
	Evicted   uint64 // unreplied flows removed to make room
	Retired   uint64 // flows removed by SetRules because their rule went
	Drops     [NumDropReasons]uint64
}

// counters are updated with atomics: drops happen on every goroutine that
// translates, and Stats reads them from any other.
type counters struct {
	newFlows atomic.Uint64
	expired  atomic.Uint64
	evicted  atomic.Uint64
	retired  atomic.Uint64
	drops    [NumDropReasons]atomic.Uint64
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
		Evicted:   e.stats.evicted.Load(),
		Retired:   e.stats.retired.Load(),
	}
	for i := range s.Drops {
		s.Drops[i] = e.stats.drops[i].Load()
	}
	return s
}
