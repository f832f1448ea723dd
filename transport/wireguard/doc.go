// Package wireguard is the WireGuard transport: a wireguard-go device whose
// TUN side is an in-memory pipe to the gateway instead of a kernel interface.
//
// Cryptokey routing is wireguard-go's: Send hands a batch to the device, which
// picks the peer by each packet's destination among the peers' allowed IPs,
// and on receive the device drops any packet whose inner source is not in the
// sending peer's allowed IPs before it reaches the Deliverer. Deliver is
// therefore always called with transport.PeerAny.
//
// Allocation: Send copies each packet into a device buffer and returns; it
// allocates nothing per packet or per batch in steady state. Deliver is given
// the device's own buffers (16 bytes of headroom, 64 KiB each) and is called
// synchronously from the device's per-peer receive goroutine, so nothing is
// copied on receive. Drops are counted with atomic counters; no string is
// formatted on a packet path.
//
// Drops: wireguard-go discards much of what it cannot use without a trace,
// so the device runs on a conn.Bind that checks every datagram first as the
// device would (length, type, size per type, mac1, receiver index) and
// counts what it drops; what it passes is either taken by the device or
// dropped with a log line the package counts. What the kernel discards at
// the bind's sockets before the bind reads it, a full receive queue most of
// all, is read from /proc/net/udp{,6} when Drops is called and counted as
// kernel_dropped. The receive filter allocates nothing; learning an index,
// once per handshake sent, copies a small table.
//
// Peers: a peer's number is its index in Config.Peers, or the number given
// to SetPeer. SetPeer and RemovePeer change one peer while the transport
// runs, through the device's configuration protocol without replace_peers,
// so the socket and the other peers' sessions are untouched; a peer updated
// under the same public key keeps its session too. The receive filter, the
// endpoint map, the log sink's peer map and the drop counters follow each
// change.
//
// Concurrency: Send may be called from many goroutines; batches are taken one
// at a time by the device's single TUN reader, so concurrent senders queue.
// Deliver is called concurrently, one goroutine per remote peer. The peer
// table, the filter's maps and the drop counter rows are immutable
// snapshots read without locking; SetPeer and RemovePeer, serialised by a
// mutex, replace them whole. Close waits for the device's goroutines, so
// Deliver is not called after it returns.
package wireguard
