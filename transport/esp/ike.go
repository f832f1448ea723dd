package esp

import (
	"fmt"
	"net/netip"

	"github.com/snorkel-net/snorkel/transport"
	"github.com/snorkel-net/snorkel/transport/esp/ike"
)

// SetIKEHandler sets h to be given every IKE message that arrives on the
// port, with the non-ESP marker stripped (RFC 3948 §2.2), and from, its
// sender. msg is only valid during the call: h must copy what it keeps. h
// is called from the receive goroutines, one per socket family, so calls
// may overlap; it must return quickly, since ESP waits behind it. Until a
// handler is set, IKE messages are counted (ike_unhandled) and dropped.
func (t *Transport) SetIKEHandler(h func(from netip.AddrPort, msg []byte)) {
	t.ike.Store(&h)
}

func (t *Transport) handleIKE(from netip.AddrPort, msg []byte) {
	h := t.ike.Load()
	if h == nil || *h == nil {
		t.dropsAt(from).add(dropIKEUnhandled, 1)
		return
	}
	(*h)(from, msg)
}

// SendIKE sends the IKE message msg to to, behind the non-ESP marker that
// tells it from ESP on the shared port (RFC 3948 §2.2). It implements
// ike.Sender.
func (t *Transport) SendIKE(to netip.AddrPort, msg []byte) error {
	if t.closed.Load() {
		return transport.ErrClosed
	}
	if !to.Addr().IsValid() || to.Port() == 0 {
		return fmt.Errorf("esp: send IKE message to %v: want an address and a port", to)
	}
	b := make([]byte, markerLen+len(msg))
	copy(b[markerLen:], msg)
	if err := t.conn.Send([][]byte{b}, to); err != nil {
		return fmt.Errorf("esp: send IKE message to %v: %w", to, err)
	}
	return nil
}

// CountIKEDrop counts an IKE message that the engine discarded, as
// ike_<reason>, so that Drops lists everything thrown away on the port. It
// implements ike.DropCounter.
func (t *Transport) CountIKEDrop(peer int, r ike.DropReason) { t.dropsOf(peer).ike[r].Add(1) }
