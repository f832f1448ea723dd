package netprobe

// The one line each probe program (`snorkel lab-pod`) prints on success,
// which diagnose reads back from the pod's log with fmt.Sscanf.
const (
	// SawLine: the source address and port of the datagram Sniff saw.
	SawLine = "saw the token from %s"
	// SentLine: how many datagrams SendToken sent.
	SentLine = "sent %d datagrams"
	// RepliesLine: answered, sent, and the address pinged.
	RepliesLine = "replies %d/%d from %s"
	// RouteLine: RouteTo's device and MTU.
	RouteLine = "route dev %s mtu %d"
	// PathLine: TCPMSS's MSS, then PathMTU's size.
	PathLine = "mss %d largest %d"
	// ConnectedLine: the address and port a TCP connection was made to.
	ConnectedLine = "connected to %s"
)
