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
	fmtInvalidCookie     = "Could not decrypt invalid cookie response"
)

// Lines after which a peer's endpoint may have moved to the handshake's
// source (WireGuard paper §6.5).
const (
	fmtGotInitiation = "%v - Received handshake initiation"
	fmtGotResponse   = "%v - Received handshake response"
)

// errorInterval is the least time between two error lines logged from the
// device, so that a failing underlay cannot flood the log.
const errorInterval = time.Second

// logSink receives wireguard-go's log lines: it turns those that report a
// drop into counter increments and passes the rest to slog.
type logSink struct {
	log   *slog.Logger
	drops *dropCounters
	// peers maps the device's peers to their peer numbers. It is replaced
	// whole when the peers change.
	peers atomic.Pointer[map[*device.Peer]int]
	// refined counts replay and flood lines whose "invalid initiation" line,
	// which the device logs next for the same message, is still to come.
	refined atomic.Int64
	// handshook is signalled, without blocking, after each completed
	// handshake.
	handshook chan struct{}

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
	case fmtInvalidMAC1, fmtInvalidResponse, fmtInvalidCookie:
		s.drops.add(transport.PeerAny, reasonHandshakeInvalid, 1)
	case fmtInvalidInitiation:
		// The initiation was counted by its replay or flood line if
		// one came first. Another worker's line may take the claim, but
		// each claim stands for one line, so the totals come out exact.
		for {
			c := s.refined.Load()
			if c == 0 {
				s.drops.add(transport.PeerAny, reasonHandshakeInvalid, 1)
				break
			}
			if s.refined.CompareAndSwap(c, c-1) {
				break
			}
		}
	case fmtHandshakeReplay:
		s.refined.Add(1)
		s.drops.add(s.peerIndex(args), reasonHandshakeReplay, 1)
	case fmtHandshakeFlood:
		s.refined.Add(1)
		s.drops.add(s.peerIndex(args), reasonHandshakeFlood, 1)
	case fmtGotInitiation, fmtGotResponse:
		select {
		case s.handshook <- struct{}{}:
		default:
		}
		s.debug(format, args)
	default:
		s.debug(format, args)
	}
}

func (s *logSink) debug(format string, args []any) {
	if s.log.Enabled(context.Background(), slog.LevelDebug) {
		s.log.Debug(fmt.Sprintf(format, args...))
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
