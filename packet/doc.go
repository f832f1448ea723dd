// Package packet reads and rewrites IPv4 and IPv6 packets in place for the
// gateway's data path: typed views over []byte (IPv4, IPv6, TCP, UDP, ICMPv4,
// ICMPv6), a decode of the fields the fast path needs into a reusable Parsed,
// the Internet checksum (RFC 1071; on amd64 with AVX2 a vector loop sums long
// inputs, checksum_amd64.s), address and port rewriting with incremental
// checksum updates (RFC 1624), access to the packet quoted in an ICMP error,
// TCP MSS clamping, the ICMP "packet too big" reply, and the offloads of a
// TUN device with the virtio-net header: cutting a TCP or UDP super-packet
// into segments (Segment, gso.go) and joining a batch's TCP segments back
// into super-packets (Coalescer, gro.go).
//
// Allocation: nothing in this package allocates; a Coalescer reuses its
// memory from one batch to the next. Decode fills a Parsed owned by
// the caller, which should keep one per worker and reuse it for every packet.
// Views are slices of the caller's buffer; setters write through to it.
//
// Concurrency: the package keeps no state but a Coalescer's. A buffer, its
// Parsed and a Coalescer follow the usual rule for mutable data: one
// goroutine at a time.
//
// Bad input: Decode and DecodeInner accept any byte slice and report a
// malformed packet with a DropReason instead of panicking. The functions that
// take a Parsed are safe on any buffer that decoded to DropNone into that
// Parsed. The views' accessors trust the lengths Decode checked and, like any
// slice index, panic when used on a shorter buffer.
package packet
