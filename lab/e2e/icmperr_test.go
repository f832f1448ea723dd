package e2e

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/snorkel-net/snorkel/lab/topo"
)

// icmpError is an ICMP error the kernel queued on a UDP socket.
type icmpError struct {
	typ, code uint8
	// info is the next-hop MTU of a "fragmentation needed".
	info     uint32
	offender netip.Addr
	// payload is the datagram the error quoted, as the socket sent it.
	payload []byte
}

func (e icmpError) String() string {
	return fmt.Sprintf("ICMP type %d code %d from %s (info %d)", e.typ, e.code, e.offender, e.info)
}

// probeUDP sends one datagram of size bytes, with the given TTL and with DF
// set, from a socket in ns connected to dst, and returns the first ICMP error
// queued on the socket (IP_RECVERR). Linux queues an error on a UDP socket
// only when the packet it quotes carries the socket's own addresses and
// ports (udp_err looks the socket up by them), so an error that arrives is
// one whose quote was translated back to what the sender sent.
func probeUDP(ctx context.Context, ns *topo.NS, dst netip.AddrPort, ttl, size int, timeout time.Duration) (icmpError, error) {
	c, err := ns.DialContext(ctx, "udp4", dst.String())
	if err != nil {
		return icmpError{}, err
	}
	defer c.Close()
	raw, err := c.(*net.UDPConn).SyscallConn()
	if err != nil {
		return icmpError{}, err
	}
	var serr error
	err = raw.Control(func(fd uintptr) {
		for _, o := range [][2]int{{unix.IP_RECVERR, 1}, {unix.IP_TTL, ttl}, {unix.IP_MTU_DISCOVER, unix.IP_PMTUDISC_DO}} {
			if serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, o[0], o[1]); serr != nil {
				return
			}
		}
	})
	if err = errors.Join(err, serr); err != nil {
		return icmpError{}, fmt.Errorf("socket options: %w", err)
	}
	payload := bytes.Repeat([]byte("snorkel-probe-"), size/14+1)[:size]
	if _, err := c.Write(payload); err != nil {
		return icmpError{}, fmt.Errorf("send %d bytes with TTL %d to %s: %w", size, ttl, dst, err)
	}
	c.SetReadDeadline(time.Now().Add(timeout))
	buf := make([]byte, 65536)
	oob := make([]byte, 512)
	var (
		n, oobn int
		rerr    error
	)
	err = raw.Read(func(fd uintptr) bool {
		n, oobn, _, _, rerr = unix.Recvmsg(int(fd), buf, oob, unix.MSG_ERRQUEUE)
		return !errors.Is(rerr, unix.EAGAIN)
	})
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return icmpError{}, fmt.Errorf("no ICMP error for the socket within %v", timeout)
	}
	if err = errors.Join(err, rerr); err != nil {
		return icmpError{}, fmt.Errorf("read the error queue: %w", err)
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil {
		return icmpError{}, err
	}
	for _, m := range msgs {
		if m.Header.Level != unix.IPPROTO_IP || m.Header.Type != unix.IP_RECVERR || len(m.Data) < 16+8 {
			continue
		}
		if origin := m.Data[4]; origin != unix.SO_EE_ORIGIN_ICMP {
			return icmpError{}, fmt.Errorf("error queue holds an error of origin %d, not an ICMP error", origin)
		}
		// struct sock_extended_err, then the offender (SO_EE_OFFENDER) as
		// a struct sockaddr_in.
		e := icmpError{
			typ:     m.Data[5],
			code:    m.Data[6],
			info:    binary.NativeEndian.Uint32(m.Data[8:12]),
			payload: buf[:n],
		}
		e.offender = netip.AddrFrom4([4]byte(m.Data[16+4 : 16+8]))
		return e, nil
	}
	return icmpError{}, errors.New("the error queue returned no IP_RECVERR message")
}
