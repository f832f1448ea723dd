package wireguard

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/snorkel-net/snorkel/transport"
	"golang.zx2c4.com/wireguard/device"
)

// wireguard-go reports its drops only as log lines. These are the format
// strings of the lines that stand for a dropped packet; a test checks that
// each still occurs in the wireguard-go sources this module builds with.
const (
	fmtSpoofedV4         = "IPv4 packet with disallowed source address from %v"
	fmtSpoofedV6         = "IPv6 packet with disallowed source address from %v"
	fmtBadIPVersionRx    = "Packet with invalid IP version from %v"
	fmtBadIPVersionTx    = "Received packet with unknown IP version"
	fmtInvalidMAC1       = "Received packet with invalid mac1"
	fmtInvalidInitiation = "Received invalid initiation message from %s"
	fmtInvalidResponse   = "Received invalid response message from %s"
	fmtHandshakeReplay   = "%v - ConsumeMessageInitiation: handshake replay @ %v"
	fmtHandshakeFlood    = "%v - ConsumeMessageInitiation: handshake flood"
	fmtUnknownMessage    = "Received message with unknown type"
)

// errorInterval is the least time between two error lines logged from the
// device, so that a failing underlay cannot flood the log.
const errorInterval = time.Second

// logSink receives wireguard-go's log lines: it turns those that report a
// drop into counter increments and passes the rest to slog.
type logSink struct {
	log   *slog.Logger
	drops *dropCounters
	// peers maps the device's peers to their index in Config.Peers. It is
	// stored once the peers exist and never changed.
	peers atomic.Pointer[map[*device.Peer]int]

	mu         sync.Mutex
	lastError  time.Time
	suppressed int
}

func (s *logSink) deviceLogger() *device.Logger {
	return &device.Logger{Verbosef: s.verbosef, Errorf: s.errorf}
}

// verbosef runs for every packet the device drops, so the drop lines are
// matched by their format string and counted without formatting.
func (s *logSink) verbosef(format string, args ...any) {
	switch format {
	case fmtSpoofedV4, fmtSpoofedV6:
		s.drops.add(s.peerIndex(args), reasonSpoofedSource, 1)
	case fmtBadIPVersionRx:
		s.drops.add(s.peerIndex(args), reasonBadIPVersion, 1)
	case fmtBadIPVersionTx:
		s.drops.add(transport.PeerAny, reasonBadIPVersion, 1)
	case fmtInvalidMAC1, fmtInvalidInitiation, fmtInvalidResponse:
		s.drops.add(transport.PeerAny, reasonHandshakeInvalid, 1)
	case fmtHandshakeReplay:
		s.drops.add(s.peerIndex(args), reasonHandshakeReplay, 1)
	case fmtHandshakeFlood:
		s.drops.add(s.peerIndex(args), reasonHandshakeFlood, 1)
	case fmtUnknownMessage:
		s.drops.add(transport.PeerAny, reasonUnknownMessage, 1)
	default:
		if s.log.Enabled(context.Background(), slog.LevelDebug) {
			s.log.Debug(fmt.Sprintf(format, args...))
		}
	}
}

// peerIndex maps the *device.Peer that wireguard-go passes as the first
// argument of a peer's log line to its index.
func (s *logSink) peerIndex(args []any) int {
	m := s.peers.Load()
	if m == nil || len(args) == 0 {
		return transport.PeerAny
	}
	p, ok := args[0].(*device.Peer)
	if !ok {
		return transport.PeerAny
	}
	if i, ok := (*m)[p]; ok {
		return i
	}
	return transport.PeerAny
}

func (s *logSink) errorf(format string, args ...any) {
	now := time.Now()
	s.mu.Lock()
	if now.Sub(s.lastError) < errorInterval {
		s.suppressed++
		s.mu.Unlock()
		return
	}
	suppressed := s.suppressed
	s.lastError, s.suppressed = now, 0
	s.mu.Unlock()
	if suppressed > 0 {
		s.log.Error(fmt.Sprintf(format, args...), "suppressed", suppressed)
		return
	}
	s.log.Error(fmt.Sprintf(format, args...))
}
