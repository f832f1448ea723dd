package wireguard

import (
	"encoding/binary"
	"time"

	"github.com/snorkel-net/snorkel/transport"
	"golang.zx2c4.com/wireguard/conn"
	"golang.zx2c4.com/wireguard/device"
)

// filterBind is the conn.Bind the device runs on: wireguard-go's own bind
// with a filter on both directions. On receive it drops, and counts, the
// datagrams the device would discard without a log line; on send it learns
// the indices the device hands out and counts the handshakes the device
// refused under load.
type filterBind struct {
	conn.Bind
	f *filter
}

var _ conn.Bind = (*filterBind)(nil)

// Open wraps each of the bind's receive functions. The device runs each in
// a goroutine of its own, so each gets its own mac1 hash.
func (b *filterBind) Open(port uint16) ([]conn.ReceiveFunc, uint16, error) {
	fns, actual, err := b.Bind.Open(port)
	if err != nil {
		return nil, 0, err
	}
	out := make([]conn.ReceiveFunc, len(fns))
	for i, fn := range fns {
		r := &receiver{recv: fn, f: b.f, mac: b.f.newMacer()}
		out[i] = r.receive
	}
	return out, actual, nil
}

// Send learns from the handshake messages in bufs before they leave, so
// that the answer cannot arrive before its index is known.
func (b *filterBind) Send(bufs [][]byte, ep conn.Endpoint) error {
	for _, msg := range bufs {
		b.sent(msg, ep)
	}
	return b.Bind.Send(bufs, ep)
}

func (b *filterBind) sent(msg []byte, ep conn.Endpoint) {
	if len(msg) < device.MinMessageSize {
		return
	}
	switch binary.LittleEndian.Uint32(msg) {
	case device.MessageInitiationType, device.MessageResponseType:
		// The sender index follows the type in both (§5.4.2, §5.4.3);
		// the peer addresses its answers and transport messages to it.
		// The recipient is noted so that the index can be forgotten
		// with the peer.
		b.f.indices.learn(binary.LittleEndian.Uint32(msg[4:]), b.f.recipientOf(msg), time.Now())
	case device.MessageCookieReplyType:
		// The device sends a cookie reply only in place of handling a
		// handshake message it received under load (§5.4.7).
		b.f.drops.add(b.f.peerOf(ep), reasonUnderLoad, 1)
	}
}

// receiver filters the batches of one of the bind's receive functions.
type receiver struct {
	recv conn.ReceiveFunc
	f    *filter
	mac  *macer
}

// receive hides a dropped datagram by zeroing its size, which the device
// skips as too short: the device reads each datagram from the buffer array
// it passed at the same position, so the batch cannot be compacted by
// moving slices.
func (r *receiver) receive(bufs [][]byte, sizes []int, eps []conn.Endpoint) (int, error) {
	n, err := r.recv(bufs, sizes, eps)
	for i := range n {
		if sizes[i] == 0 {
			// An empty datagram; the bind does not set its endpoint.
			r.f.drops.add(transport.PeerAny, reasonTooShort, 1)
			continue
		}
		if why, drop := r.f.verdict(r.mac, bufs[i][:sizes[i]]); drop {
			r.f.drops.add(r.f.peerOf(eps[i]), why, 1)
			sizes[i] = 0
		}
	}
	return n, err
}
