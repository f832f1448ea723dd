// Package natengine is Globalnet: it translates packets between a cluster's
// own addresses (pod and service CIDRs, which may overlap other clusters')
// and the global address space, with its own connection tracking. It is pure
// logic over package packet: no I/O, an injected clock.
//
// The gateway calls Egress for packets leaving towards a remote cluster's
// global CIDR and Ingress for packets arriving from one. Rules are an
// immutable snapshot swapped atomically by SetRules; flows live in the
// connection-tracking table across rule changes while their rule does.
//
// Translation: a new egress flow takes a global source address by
// Submariner's precedence (pod-selector pool, namespace pool, a headless
// pod's own global IP, cluster pool; within a pool by a stable hash of the
// pod's address) and keeps its source port when free. A new ingress flow to
// an ingress rule's global IP is sent to the rule's local address, port
// unchanged. Replies, ICMP errors (through their quote) and non-first
// fragments (through their first fragment) follow the flow.
//
// Allocation: translating a packet of a known flow, an ICMP error or a
// fragment allocates nothing. The table is a slab of fixed pages of
// pointer-free flows indexed by a bucket array sized from Config.MaxFlows,
// so the garbage collector never scans it. On Linux the index is mapped
// outside the Go heap, so that its 32 bytes a flow do not raise the
// collector's goal, and unmapped once the engine is unreachable
// (index_linux.go); new flows may grow the expiry
// wheel's slots and, for UDP, the map of endpoint-independent mappings.
//
// Fair shares: each source — a local address for what it starts, a remote
// cluster (not a remote address, which the remote chooses) for what arrives
// from it — may hold at most Config.MaxFlowsPerSource flows (default an
// eighth of the table) and Config.MaxFragmentsPerSource pending first
// fragments (default a sixteenth). A source at its flow share is refused
// (DropSourceLimit) before anything is evicted for it; a full flow table
// then gives up expired flows, the oldest unreplied flow, and last a flow
// that is not an established TCP connection of a source holding at least
// two more flows than the new flow's, least recently seen among a few
// sampled; an established connection is never evicted. The fragment table
// never refuses: a source at its share loses its own oldest entry, a full
// table its oldest. Counts live in a map of sources touched only when state
// is created or removed; a flow carries its source's id, so lookups stay one
// probe and allocation-free (shares.go, fragments.go).
//
// Concurrency: Egress and Ingress may run on any number of goroutines at
// once (the gateway runs Egress on one, Ingress on several). A packet of a
// known flow takes one of 1024 bucket locks and updates the flow's last-seen
// time and state with atomics. Creating, expiring, evicting and retiring
// flows take one engine-wide lock. Expiry runs a timing wheel, a bounded
// amount of it per packet when a new second begins, and never scans the
// table. SetRules, Flows and Stats may run at any time.
//
// Replication (journal.go, record.go, replica.go, import.go): an attached
// Journal receives a Record of every flow created, every change of a
// flow's state word and every flow removed; it is bounded, and a consumer
// that falls behind is told to Dump the table again. Writing a record
// allocates nothing; without a journal an event costs one atomic load. A
// standby keeps the records in a Replica and Imports it when it takes over,
// so that established flows keep their global addresses and ports.
//
// Clusterset IPs (clusterset.go): Clusterset carries connections to the
// VIPs of MCS ServiceImports, without Globalnet. A new connection to a VIP
// port gets one backend, the local cluster's when there is one, else the
// next remote (round-robin) whose connection is up; its destination becomes
// the backend's address, port unchanged, and a connection to the local
// backend also leaves from the SNAT address with a port no other connection
// to that backend holds (the client's own when free), so that the replies
// come back to the gateway. Replies are rewritten back to come from the
// VIP. A connection keeps its backend while the rules list it; SetRules
// ends those whose VIP, port or backend went.
//
// Clusterset is a small type beside Engine, not a rule kind of it: its
// connections are keyed on four addresses (client, VIP, backend, SNAT)
// where Engine's flows have three, and there are few of them (connections
// to some services, not a cluster's whole egress). A map per lock shard
// (64) holds both keys of each connection; expiry examines a bounded slice
// of the connections once a second, and a lookup treats an expired
// connection as gone, so expiry is never late. It shares Engine's
// timeouts, TCP state tracking and port search. A packet of a known
// connection takes one shard's read lock and allocates nothing. ICMP
// errors about a connection follow it both ways through their quote, as
// Engine's do; non-first fragments carry no ports to find a connection by
// and are dropped (counted).
package natengine
