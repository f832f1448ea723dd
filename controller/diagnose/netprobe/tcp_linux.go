package netprobe

import (
	"context"
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// TCPMSS connects to addr and returns the MSS the connection settled on
// (TCP_MAXSEG: the peer's SYN-ACK MSS, as the path may have clamped it,
// less the options every segment carries).
func TCPMSS(ctx context.Context, addr netip.AddrPort) (int, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp4", addr.String())
	if err != nil {
		return 0, fmt.Errorf("netprobe: %w", err)
	}
	defer conn.Close()
	raw, err := conn.(*net.TCPConn).SyscallConn()
	if err != nil {
		return 0, err
	}
	var mss int
	var serr error
	if err := raw.Control(func(fd uintptr) {
		mss, serr = unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_MAXSEG)
	}); err != nil {
		return 0, err
	}
	if serr != nil {
		return 0, fmt.Errorf("netprobe: TCP_MAXSEG: %w", serr)
	}
	return mss, nil
}

// Route is the device this host routes an address through.
type Route struct {
	Dev string
	// MTU is the device's, or the route's when it sets a smaller one.
	MTU int
}

// RouteTo asks the kernel how it routes dst.
func RouteTo(dst netip.Addr) (Route, error) {
	routes, err := netlink.RouteGet(dst.AsSlice())
	if err != nil || len(routes) == 0 {
		return Route{}, fmt.Errorf("netprobe: no route to %s: %v", dst, err)
	}
	link, err := netlink.LinkByIndex(routes[0].LinkIndex)
	if err != nil {
		return Route{}, fmt.Errorf("netprobe: the device of the route to %s: %w", dst, err)
	}
	r := Route{Dev: link.Attrs().Name, MTU: link.Attrs().MTU}
	if m := routes[0].MTU; m > 0 && m < r.MTU {
		r.MTU = m
	}
	return r, nil
}
