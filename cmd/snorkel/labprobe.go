package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"time"

	"github.com/snorkel-net/snorkel/controller/diagnose/netprobe"
)

// runProbe is one of the `lab-pod` programs snorkel diagnose runs on the
// nodes: it prints netprobe's line for its result, and fails only when
// the probe could not run.
func runProbe(ctx context.Context, name string, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("lab-pod "+name, flag.ContinueOnError)
	port := fs.Uint("port", 0, "sniff-udp: the UDP port to watch")
	token := fs.String("token", "", "sniff-udp, send-udp: the token the datagrams carry")
	timeout := fs.Duration("timeout", 30*time.Second, "sniff-udp: how long to watch")
	from := fs.String("from", "", "send-udp: the local address to send from")
	to := fs.String("to", "", "send-udp: the address and port to send to")
	sendFor := fs.Duration("for", 30*time.Second, "send-udp: how long to send, one datagram every 200ms")
	count := fs.Int("count", 3, "ping: echo requests to send; tcp-connect: attempts")
	size := fs.Int("size", 0, "ping: each packet's IPv4 length (default 84)")
	ttl := fs.Int("ttl", 0, "ping: the packets' TTL (default the system's)")
	df := fs.Bool("df", false, "ping: set don't-fragment")
	tcp := fs.String("tcp", "", "path-mtu: a TCP server (IP:PORT) whose MSS to read")
	lo := fs.Int("lo", 576, "path-mtu: the smallest size to try")
	hi := fs.Int("hi", 1500, "path-mtu: the largest size to try")
	dial := fs.Duration("dial-timeout", 5*time.Second, "tcp-connect: how long each attempt may take")
	var rest []string
	if err := parseFlags(fs, args, &rest, out); err != nil {
		return err
	}
	var dst netip.Addr
	if name == "ping" || name == "route-mtu" || name == "path-mtu" {
		if len(rest) != 1 {
			return fmt.Errorf("%s: give one IPv4 address", name)
		}
		var err error
		if dst, err = netip.ParseAddr(rest[0]); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	var line string
	switch name {
	case "sniff-udp":
		if *port == 0 || *port > 65535 || *token == "" {
			return errors.New("sniff-udp: --port (1-65535) and --token are required")
		}
		sctx, cancel := context.WithTimeout(ctx, *timeout)
		defer cancel()
		src, err := netprobe.Sniff(sctx, uint16(*port), []byte(*token))
		if err != nil {
			return fmt.Errorf("sniff-udp: no datagram to UDP port %d with the token arrived within %s: %w", *port, *timeout, err)
		}
		line = fmt.Sprintf(netprobe.SawLine, src)
	case "send-udp":
		src, err := netip.ParseAddr(*from)
		if err != nil {
			return fmt.Errorf("send-udp: --from: %w", err)
		}
		dst, err := netip.ParseAddrPort(*to)
		if err != nil {
			return fmt.Errorf("send-udp: --to: %w", err)
		}
		sctx, cancel := context.WithTimeout(ctx, *sendFor)
		defer cancel()
		n, err := netprobe.SendToken(sctx, src, dst, []byte(*token), 200*time.Millisecond)
		if err != nil {
			return fmt.Errorf("send-udp: %w", err)
		}
		line = fmt.Sprintf(netprobe.SentLine, n)
	case "ping":
		n, err := netprobe.Ping(ctx, dst, *count, netprobe.Echo{Size: *size, TTL: *ttl, DontFragment: *df})
		if err != nil {
			return fmt.Errorf("ping: %w", err)
		}
		line = fmt.Sprintf(netprobe.RepliesLine, n, *count, dst)
	case "route-mtu":
		r, err := netprobe.RouteTo(dst)
		if err != nil {
			return fmt.Errorf("route-mtu: %w", err)
		}
		line = fmt.Sprintf(netprobe.RouteLine, r.Dev, r.MTU)
	case "path-mtu":
		server, err := netip.ParseAddrPort(*tcp)
		if err != nil {
			return fmt.Errorf("path-mtu: --tcp: %w", err)
		}
		// The MSS first: the DF echoes teach the kernel the path MTU,
		// which would then bound the MSS whatever the gateway clamps.
		mss, err := netprobe.TCPMSS(ctx, server)
		if err != nil {
			return fmt.Errorf("path-mtu: %w", err)
		}
		largest, err := netprobe.PathMTU(ctx, dst, *lo, *hi, 2)
		if err != nil {
			return fmt.Errorf("path-mtu: %w", err)
		}
		line = fmt.Sprintf(netprobe.PathLine, mss, largest)
	case "tcp-connect":
		if len(rest) != 1 {
			return errors.New("tcp-connect: give one IP:PORT")
		}
		addr, err := netip.ParseAddrPort(rest[0])
		if err != nil {
			return fmt.Errorf("tcp-connect: %w", err)
		}
		if err := tcpConnect(ctx, addr, *count, *dial); err != nil {
			return fmt.Errorf("tcp-connect: %w", err)
		}
		line = fmt.Sprintf(netprobe.ConnectedLine, addr)
	}
	_, err := fmt.Fprintln(out, line)
	return err
}

// tcpConnect opens and closes a TCP connection to addr, trying up to
// attempts times, each bounded by timeout: one lost SYN is not a closed
// port.
func tcpConnect(ctx context.Context, addr netip.AddrPort, attempts int, timeout time.Duration) error {
	var err error
	for range max(attempts, 1) {
		d := net.Dialer{Timeout: timeout}
		var c net.Conn
		if c, err = d.DialContext(ctx, "tcp", addr.String()); err == nil {
			return c.Close()
		}
		if ctx.Err() != nil {
			break
		}
	}
	return err
}
