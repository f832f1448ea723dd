package netprobe

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"time"
)

// SendToken sends a datagram carrying token from from (an address of
// this host, with a port the kernel picks) to to, every interval until
// ctx ends, and returns how many it sent. A send that fails is retried at
// the next tick: the route may not be there yet.
func SendToken(ctx context.Context, from netip.Addr, to netip.AddrPort, token []byte, interval time.Duration) (int, error) {
	laddr := &net.UDPAddr{IP: from.AsSlice()}
	conn, err := net.DialUDP("udp", laddr, net.UDPAddrFromAddrPort(to))
	if err != nil {
		return 0, fmt.Errorf("netprobe: UDP from %s to %s: %w", from, to, err)
	}
	defer conn.Close()
	t := time.NewTicker(interval)
	defer t.Stop()
	sent := 0
	var last error
	for {
		if _, err := conn.Write(token); err != nil {
			last = err
		} else {
			sent++
		}
		select {
		case <-ctx.Done():
			if sent == 0 && last != nil {
				return 0, fmt.Errorf("netprobe: sending to %s: %w", to, last)
			}
			return sent, nil
		case <-t.C:
		}
	}
}
