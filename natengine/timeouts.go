package natengine

import (
	"fmt"
	"time"
)

// Timeouts are the idle timeouts of flows, by protocol and state. A flow
// expires when it has seen no packet (ICMP errors aside) for its timeout.
type Timeouts struct {
	// TCPEstablished applies once the three-way handshake is complete and
	// until a FIN or RST. RFC 5382, REQ-5: at least 2 hours 4 minutes.
	TCPEstablished time.Duration
	// TCPTransitory applies to connections partly open or partly closed
	// (SYN seen, FIN seen, RST). RFC 5382, REQ-5: at least 4 minutes.
	TCPTransitory time.Duration
	// UDP applies to UDP flows and flows of protocols without ports once
	// they have seen a reply. RFC 4787, REQ-5: at least 2 minutes,
	// 5 recommended. An unreplied flow lives min(UDP, 2 minutes).
	UDP time.Duration
	// ICMP applies to ICMP and ICMPv6 echo flows. RFC 5508, REQ-1: at
	// least 60 seconds.
	ICMP time.Duration
}

// Default timeouts: the floors of RFC 5382, 4787 and 5508.
const (
	DefaultTCPEstablished = 7440 * time.Second
	DefaultTCPTransitory  = 240 * time.Second
	DefaultUDP            = 300 * time.Second
	DefaultICMP           = 60 * time.Second
)

// udpUnrepliedMax caps the timeout of a UDP flow that has not seen a reply:
// the 2-minute floor of RFC 4787, REQ-5. A shorter life for flows nobody
// answers keeps scans and floods from holding the table.
const udpUnrepliedMax = 120

// maxTimeout bounds every timeout, and with it the expiry wheel, whose
// size is the longest timeout in seconds.
const maxTimeout = 24 * time.Hour

// timeouts are Timeouts in whole seconds of the engine's clock.
type timeouts struct {
	tcpEst, tcpTrans, udp, udpUnreplied, icmp uint32
	// tcpCheck is how often an established TCP flow is looked at: a FIN
	// or RST can shorten its timeout to tcpTrans at any moment, and the
	// wheel must not hold it past that.
	tcpCheck uint32
}

func (t Timeouts) withDefaults() Timeouts {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&t.TCPEstablished, DefaultTCPEstablished)
	def(&t.TCPTransitory, DefaultTCPTransitory)
	def(&t.UDP, DefaultUDP)
	def(&t.ICMP, DefaultICMP)
	return t
}

func (t Timeouts) compile() (timeouts, error) {
	fields := []struct {
		name string
		d    time.Duration
	}{
		{"TCPEstablished", t.TCPEstablished},
		{"TCPTransitory", t.TCPTransitory},
		{"UDP", t.UDP},
		{"ICMP", t.ICMP},
	}
	for _, f := range fields {
		if f.d < 0 || f.d > maxTimeout {
			return timeouts{}, fmt.Errorf("natengine: Config.Timeouts.%s %v is out of range; use 1s to %v, or 0 for the default", f.name, f.d, maxTimeout)
		}
	}
	c := timeouts{
		tcpEst:   seconds(t.TCPEstablished),
		tcpTrans: seconds(t.TCPTransitory),
		udp:      seconds(t.UDP),
		icmp:     seconds(t.ICMP),
	}
	c.udpUnreplied = min(c.udp, udpUnrepliedMax)
	c.tcpCheck = min(c.tcpEst, c.tcpTrans)
	return c, nil
}

// seconds rounds d up, so that a timeout never fires early.
func seconds(d time.Duration) uint32 {
	return uint32((d + time.Second - 1) / time.Second)
}

// longest is the longest timeout, which sizes the expiry wheel.
func (t *timeouts) longest() uint32 {
	return max(t.tcpEst, t.tcpTrans, t.udp, t.icmp)
}

// of returns the idle timeout of flow f in state st.
func (t *timeouts) of(f *flow, st uint32) uint32 { return t.ofState(f.echo(), st) }

// ofState returns the idle timeout of a flow in state st, an ICMP echo
// flow if echo.
func (t *timeouts) ofState(echo bool, st uint32) uint32 {
	switch FlowState(st & stateMask) {
	case StateEstablished:
		return t.tcpEst
	case StateUnreplied:
		if echo {
			return t.icmp
		}
		return t.udpUnreplied
	case StateReplied:
		if echo {
			return t.icmp
		}
		return t.udp
	}
	return t.tcpTrans
}

// check returns when the wheel should next look at f, last seen at seen in
// state st, at time now: at its deadline, or sooner for a TCP flow, whose
// timeout a FIN or RST shrinks to tcpTrans from the moment it is seen.
// Looking every tcpCheck seconds is therefore never late.
func (t *timeouts) check(f *flow, st, seen, now uint32) uint32 {
	d := seen + t.of(f, st)
	if f.proto == protoTCP {
		d = min(d, now+t.tcpCheck)
	}
	return d
}
