package transporttest

import (
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
)

// NAT is one UDP mapping of a masquerading router, on loopback: what the
// inside sends to Inside leaves from Outside towards the peer, and what the
// peer sends to Outside goes back to the inside sender. Rebind moves the
// mapping to a new outside port or address, as a NAT does that lost its
// state; what is sent to the old one is lost from then on.
type NAT struct {
	peer    netip.AddrPort
	inside  *net.UDPConn
	outside atomic.Pointer[net.UDPConn]
	// back is the inside sender, where the peer's datagrams go.
	back atomic.Pointer[netip.AddrPort]
	wg   sync.WaitGroup
}

// NewNAT opens a mapping towards peer; it is closed when the test ends.
func NewNAT(t testing.TB, peer netip.AddrPort) *NAT {
	t.Helper()
	n := &NAT{peer: peer}
	n.inside = listen(t, peer.Addr())
	n.outside.Store(listen(t, peer.Addr()))
	n.wg.Go(n.forward)
	out := n.outside.Load()
	n.wg.Go(func() { n.reverse(out) })
	t.Cleanup(func() {
		n.inside.Close()
		n.outside.Load().Close()
		n.wg.Wait()
	})
	return n
}

func listen(t testing.TB, a netip.Addr) *net.UDPConn {
	t.Helper()
	c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(a, 0)))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Inside is where the inside sends what is for the peer.
func (n *NAT) Inside() netip.AddrPort { return addrOf(n.inside) }

// Outside is where the peer sees the inside's datagrams come from.
func (n *NAT) Outside() netip.AddrPort { return addrOf(n.outside.Load()) }

func addrOf(c *net.UDPConn) netip.AddrPort {
	return c.LocalAddr().(*net.UDPAddr).AddrPort()
}

// Rebind gives the mapping a new outside port at a, which may be the
// address it has.
func (n *NAT) Rebind(t testing.TB, a netip.Addr) {
	t.Helper()
	c := listen(t, a)
	n.wg.Go(func() { n.reverse(c) })
	n.outside.Swap(c).Close()
}

func (n *NAT) forward() {
	buf := make([]byte, 65535)
	for {
		m, from, err := n.inside.ReadFromUDPAddrPort(buf)
		if err != nil {
			return
		}
		n.back.Store(&from)
		// A write that races with Rebind's close is a datagram the NAT
		// lost, as a real one may.
		n.outside.Load().WriteToUDPAddrPort(buf[:m], n.peer)
	}
}

func (n *NAT) reverse(c *net.UDPConn) {
	buf := make([]byte, 65535)
	for {
		m, _, err := c.ReadFromUDPAddrPort(buf)
		if err != nil {
			return
		}
		if to := n.back.Load(); to != nil {
			n.inside.WriteToUDPAddrPort(buf[:m], *to)
		}
	}
}
