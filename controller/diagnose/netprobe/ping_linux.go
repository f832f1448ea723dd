package netprobe

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"time"

	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"
	"golang.org/x/sys/unix"
)

// Echo is how Ping sends its echo requests.
type Echo struct {
	// Size is each packet's IPv4 length, headers included; 0 is 84, ping's.
	Size int
	// TTL is the packets' time to live; 0 is the system's default. A TTL
	// of 1 reaches only hosts on a subnet this one is on.
	TTL int
	// DontFragment sets DF, so that a packet larger than the path MTU is
	// refused rather than fragmented.
	DontFragment bool
	// Timeout bounds the wait for each reply; 0 is one second.
	Timeout time.Duration
}

// Headers are an ICMPv4 echo's IPv4 and ICMP headers, without options.
const Headers = 20 + 8

// Ping sends count echo requests to dst one after the other and returns
// how many were answered. A request the kernel refuses to send (EMSGSIZE:
// larger than the path MTU it knows, with DF) counts as unanswered.
func Ping(ctx context.Context, dst netip.Addr, count int, e Echo) (int, error) {
	if !dst.Is4() {
		return 0, fmt.Errorf("netprobe: ping %s: IPv4 only", dst)
	}
	if e.Size == 0 {
		e.Size = 84
	}
	if e.Size < Headers {
		return 0, fmt.Errorf("netprobe: echo size %d is below the %d bytes of its headers", e.Size, Headers)
	}
	if e.Timeout == 0 {
		e.Timeout = time.Second
	}
	fd, err := rawSocket(unix.IPPROTO_ICMP)
	if err != nil {
		return 0, err
	}
	defer unix.Close(fd)
	pmtu := unix.IP_PMTUDISC_DONT
	if e.DontFragment {
		pmtu = unix.IP_PMTUDISC_PROBE
	}
	if err := unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, pmtu); err != nil {
		return 0, fmt.Errorf("netprobe: IP_MTU_DISCOVER: %w", err)
	}
	if e.TTL > 0 {
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_TTL, e.TTL); err != nil {
			return 0, fmt.Errorf("netprobe: IP_TTL: %w", err)
		}
	}
	id := os.Getpid() & 0xffff
	to := &unix.SockaddrInet4{Addr: dst.As4()}
	buf := make([]byte, 65536)
	answered := 0
	for seq := 1; seq <= count; seq++ {
		if ctx.Err() != nil {
			return answered, ctx.Err()
		}
		msg := icmp.Message{Type: ipv4.ICMPTypeEcho, Body: &icmp.Echo{ID: id, Seq: seq, Data: make([]byte, e.Size-Headers)}}
		b, err := msg.Marshal(nil)
		if err != nil {
			return answered, err
		}
		if err := unix.Sendto(fd, b, 0, to); err != nil {
			if errors.Is(err, unix.EMSGSIZE) {
				continue
			}
			return answered, fmt.Errorf("netprobe: sending an echo to %s: %w", dst, err)
		}
		if awaitReply(ctx, fd, buf, dst, id, seq, time.Now().Add(e.Timeout)) {
			answered++
		}
	}
	return answered, nil
}

// awaitReply reads fd until the echo reply to (id, seq) from dst comes,
// or deadline.
func awaitReply(ctx context.Context, fd int, buf []byte, dst netip.Addr, id, seq int, deadline time.Time) bool {
	for time.Now().Before(deadline) && ctx.Err() == nil {
		n, from, err := unix.Recvfrom(fd, buf, 0)
		if err != nil {
			continue
		}
		sa, ok := from.(*unix.SockaddrInet4)
		if !ok || netip.AddrFrom4(sa.Addr) != dst || n < 20 {
			continue
		}
		ihl := int(buf[0]&0x0f) * 4
		m, err := icmp.ParseMessage(1, buf[ihl:n])
		if err != nil || m.Type != ipv4.ICMPTypeEchoReply {
			continue
		}
		if echo, ok := m.Body.(*icmp.Echo); ok && echo.ID == id && echo.Seq == seq {
			return true
		}
	}
	return false
}

// PathMTU is the largest echo, from lo to hi bytes, that crosses to dst
// and back with DF set, by bisection; each size gets tries echoes. It
// returns 0 when not even lo crosses.
func PathMTU(ctx context.Context, dst netip.Addr, lo, hi, tries int) (int, error) {
	passes := func(size int) (bool, error) {
		n, err := Ping(ctx, dst, tries, Echo{Size: size, DontFragment: true})
		return n > 0, err
	}
	ok, err := passes(lo)
	if err != nil || !ok {
		return 0, err
	}
	for lo < hi {
		mid := (lo + hi + 1) / 2
		ok, err := passes(mid)
		if err != nil {
			return 0, err
		}
		if ok {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return lo, nil
}
