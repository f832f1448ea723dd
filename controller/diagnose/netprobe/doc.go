// Package netprobe holds the probes `snorkel diagnose` runs inside its
// pods (`snorkel lab-pod`): a sniffer that sees UDP datagrams reach a node
// without taking the port the gateway holds, a sender of marked
// datagrams, ICMP echo with a chosen size, TTL and DF bit, the path MTU
// such echoes find, and the MSS a TCP connection negotiates.
//
// Each probe runs once from the calling goroutine and allocates freely:
// none is on a packet path. They need Linux; raw sockets need CAP_NET_RAW.
package netprobe
