// Package natdiscovery finds out, for each remote gateway, whether this
// gateway reaches it at its private or its public address, and what
// address this gateway's packets arrive from there: the job of Submariner's
// NAT discovery, with its own small protocol on its own UDP port (Submariner's
// natt-discovery-port, 4490 by default).
//
// A gateway sends a request to both addresses of a remote; the remote
// answers each with the source address and port it saw. A private address
// that answers is used as is; otherwise a public one that answers is used,
// and the remote is across a NAT. The seen source tells this gateway its
// own public address without asking any service outside the clusterset.
//
// Trust: every message carries an HMAC keyed from the clusterset's
// pre-shared key, which every member cluster has (broker-info.subm) and
// nobody else should. Without it a stranger can neither make a gateway pick
// an address nor tell it a false public address. A response echoes the
// random nonce of its request and must come from the address probed, so an
// old response cannot be replayed onto a new probe. Any holder of the key
// (any member cluster) can answer for the others: the protocol proves
// reachability to the clusterset, not which cluster answered. A request has
// the size of its response, so a spoofed source gains no amplification.
//
// Concurrency: a Conn serves requests on its own goroutine and may be
// probed from any number of goroutines. Messages are small and rare; the
// package is not on the per-packet path.
package natdiscovery
