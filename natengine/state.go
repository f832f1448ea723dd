package natengine

import "github.com/snorkel-net/snorkel/packet"

// FlowState is where a flow is in its life. TCP flows follow the handshake
// and teardown; other flows only tell whether a reply was seen.
type FlowState uint8

// Flow states.
const (
	// StateUnreplied: a UDP, ICMP echo or other flow with no reply yet.
	StateUnreplied FlowState = iota + 1
	// StateReplied: a UDP, ICMP echo or other flow that has seen a reply.
	StateReplied
	// StateSynSent: TCP, the originator's first segment seen. A flow
	// picked up mid-stream starts here too.
	StateSynSent
	// StateSynReceived: TCP, the responder's SYN seen.
	StateSynReceived
	// StateEstablished: TCP, the handshake completed.
	StateEstablished
	// StateFinWait: TCP, one side has sent a FIN.
	StateFinWait
	// StateClosing: TCP, both sides have sent a FIN.
	StateClosing
	// StateClosed: TCP, a RST was seen.
	StateClosed
)

var stateNames = [...]string{
	StateUnreplied:   "unreplied",
	StateReplied:     "replied",
	StateSynSent:     "syn_sent",
	StateSynReceived: "syn_received",
	StateEstablished: "established",
	StateFinWait:     "fin_wait",
	StateClosing:     "closing",
	StateClosed:      "closed",
}

// String returns the snake_case name of s.
func (s FlowState) String() string {
	if int(s) < len(stateNames) && stateNames[s] != "" {
		return stateNames[s]
	}
	return "unknown"
}

// A flow's state word: the FlowState in the low bits, then what has been
// seen. It is one atomic word because the egress and the ingress side of a
// flow update it from different goroutines.
const (
	stateMask   = 0x0f
	stReplied   = 1 << 4 // a packet in the reply direction was seen
	stFinOrig   = 1 << 5 // the originator sent a FIN
	stFinReply  = 1 << 6 // the responder sent a FIN
	protoTCP    = packet.ProtoTCP
	protoUDP    = packet.ProtoUDP
	protoICMPv4 = packet.ProtoICMPv4
	protoICMPv6 = packet.ProtoICMPv6
)

// initialState is the state of a new flow of protocol proto, before its
// first packet is applied with advance.
func initialState(proto uint8) uint32 {
	if proto == protoTCP {
		return uint32(StateSynSent)
	}
	return uint32(StateUnreplied)
}

// advance returns the state after a packet in the reply direction (reply)
// or the original one, with TCP flags flags. It follows RFC 9293's
// connection states as far as a middlebox can see them, loosely: a
// responder that answers a mid-stream segment establishes the flow.
func advance(st uint32, proto uint8, reply bool, flags uint8) uint32 {
	if reply {
		st |= stReplied
	}
	if proto != protoTCP {
		if reply {
			st = st&^stateMask | uint32(StateReplied)
		}
		return st
	}
	s := FlowState(st & stateMask)
	syn := flags&packet.TCPFlagSYN != 0
	ack := flags&packet.TCPFlagACK != 0
	switch {
	case flags&packet.TCPFlagRST != 0:
		s = StateClosed
	case syn && !ack && !reply && (s == StateClosed || s == StateClosing):
		// The originator reuses the tuple for a new connection once the
		// old one is over (RFC 9293, section 3.6.1, reopening from
		// TIME-WAIT).
		st &^= stFinOrig | stFinReply | stReplied
		s = StateSynSent
	case s == StateSynSent && reply && syn:
		s = StateSynReceived
	case s == StateSynSent && reply && ack:
		s = StateEstablished
	case s == StateSynReceived && !reply && ack && !syn:
		s = StateEstablished
	}
	if flags&packet.TCPFlagFIN != 0 && s != StateClosed {
		if reply {
			st |= stFinReply
		} else {
			st |= stFinOrig
		}
	}
	if s != StateClosed && st&(stFinOrig|stFinReply) != 0 {
		s = StateFinWait
		if st&(stFinOrig|stFinReply) == stFinOrig|stFinReply {
			s = StateClosing
		}
	}
	return st&^stateMask | uint32(s)
}

// steady reports whether a packet leaves state word st as it is, without
// the work of advance: a packet of an established TCP connection that
// carries no SYN, FIN or RST, or of another protocol once a reply has been
// seen (or in the original direction). When steady is true,
// advance(st, proto, reply, flags) == st.
func steady(st uint32, proto uint8, reply bool, flags uint8) bool {
	if reply && st&stReplied == 0 {
		return false
	}
	if proto != protoTCP {
		return !reply || st&stateMask == uint32(StateReplied)
	}
	return flags&(packet.TCPFlagSYN|packet.TCPFlagFIN|packet.TCPFlagRST) == 0 &&
		st&(stateMask|stFinOrig|stFinReply) == uint32(StateEstablished)
}
