package netprobe

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"golang.org/x/sys/unix"
)

// pollInterval bounds each blocking read, so that a probe sees its
// context end.
const pollInterval = 200 * time.Millisecond

// Sniff waits until a UDP datagram to port whose payload holds token
// reaches this host, and returns its source. It reads a raw IPv4 socket
// of protocol UDP, which the kernel hands a copy of every datagram it
// delivers locally, after the netfilter input hook: a datagram the node's
// firewall drops is not seen, and the port stays the gateway's.
func Sniff(ctx context.Context, port uint16, token []byte) (netip.AddrPort, error) {
	fd, err := rawSocket(unix.IPPROTO_UDP)
	if err != nil {
		return netip.AddrPort{}, err
	}
	defer unix.Close(fd)
	buf := make([]byte, 65536)
	for {
		n, err := unix.Read(fd, buf)
		switch {
		case errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR):
			if ctx.Err() != nil {
				return netip.AddrPort{}, ctx.Err()
			}
			continue
		case err != nil:
			return netip.AddrPort{}, fmt.Errorf("netprobe: reading the raw UDP socket: %w", err)
		}
		if src, ok := matchUDP(buf[:n], port, token); ok {
			return src, nil
		}
	}
}

// matchUDP reports whether pkt, an IPv4 packet as a raw socket reads it,
// is a UDP datagram to port carrying token, and its source.
func matchUDP(pkt []byte, port uint16, token []byte) (netip.AddrPort, bool) {
	if len(pkt) < 20 || pkt[0]>>4 != 4 || pkt[9] != unix.IPPROTO_UDP {
		return netip.AddrPort{}, false
	}
	ihl := int(pkt[0]&0x0f) * 4
	if ihl < 20 || len(pkt) < ihl+8 {
		return netip.AddrPort{}, false
	}
	udp := pkt[ihl:]
	if binary.BigEndian.Uint16(udp[2:4]) != port || !bytes.Contains(udp[8:], token) {
		return netip.AddrPort{}, false
	}
	src := netip.AddrFrom4([4]byte(pkt[12:16]))
	return netip.AddrPortFrom(src, binary.BigEndian.Uint16(udp[0:2])), true
}

// rawSocket opens a raw IPv4 socket of proto whose reads return EAGAIN
// every pollInterval.
func rawSocket(proto int) (int, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, proto)
	if err != nil {
		return -1, fmt.Errorf("netprobe: raw socket (needs CAP_NET_RAW): %w", err)
	}
	tv := unix.NsecToTimeval(pollInterval.Nanoseconds())
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("netprobe: SO_RCVTIMEO: %w", err)
	}
	return fd, nil
}
