package wireguard

import (
	"os"
	"sync"

	"github.com/snorkel-net/snorkel/transport"
	"golang.zx2c4.com/wireguard/conn"
	"golang.zx2c4.com/wireguard/tun"
)

// sendBatch is one Send call in flight: the device's TUN reader copies the
// packets out and then signals done, after which the sender owns its buffers
// again. sendBatches are pooled so that Send does not allocate.
type sendBatch struct {
	bufs   [][]byte
	offset int
	next   int // index of the first packet not yet copied
	done   chan struct{}
}

var sendBatchPool = sync.Pool{
	New: func() any { return &sendBatch{done: make(chan struct{}, 1)} },
}

// pipe is the tun.Device the wireguard-go device runs on. Its Read side is fed
// by Transport.Send, its Write side calls the Deliverer.
type pipe struct {
	name    string
	mtu     int
	deliver transport.Deliverer
	drops   *dropCounters

	in        chan *sendBatch
	closed    chan struct{}
	closeOnce sync.Once
	events    chan tun.Event

	// pending is a batch larger than the device's read batch; only the
	// device's single TUN reader goroutine touches it.
	pending *sendBatch
}

var _ tun.Device = (*pipe)(nil)

func newPipe(name string, mtu int, d transport.Deliverer, drops *dropCounters) *pipe {
	return &pipe{
		name:    name,
		mtu:     mtu,
		deliver: d,
		drops:   drops,
		in:      make(chan *sendBatch),
		closed:  make(chan struct{}),
		events:  make(chan tun.Event),
	}
}

// send hands bufs to the device and waits until it has copied them.
func (p *pipe) send(bufs [][]byte, offset int) error {
	b := sendBatchPool.Get().(*sendBatch)
	b.bufs, b.offset, b.next = bufs, offset, 0
	select {
	case p.in <- b:
	case <-p.closed:
		b.bufs = nil
		sendBatchPool.Put(b)
		return transport.ErrClosed
	}
	// The reader finishes a batch it has taken even while closing, because
	// the device keeps reading until Read reports an error and Read reports
	// one only when no batch is pending.
	<-b.done
	b.bufs = nil
	sendBatchPool.Put(b)
	return nil
}

// Read is called by the device's TUN reader goroutine only.
func (p *pipe) Read(bufs [][]byte, sizes []int, offset int) (int, error) {
	b := p.pending
	if b == nil {
		select {
		case b = <-p.in:
		case <-p.closed:
			return 0, os.ErrClosed
		}
	}
	n := 0
	for n < len(bufs) && b.next < len(b.bufs) {
		pkt := b.bufs[b.next][b.offset:]
		b.next++
		dst := bufs[n][offset:]
		if len(pkt) > len(dst) {
			p.drops.add(transport.PeerAny, reasonOversize, 1)
			continue
		}
		sizes[n] = copy(dst, pkt)
		n++
	}
	if b.next < len(b.bufs) {
		p.pending = b
		return n, nil
	}
	p.pending = nil
	b.done <- struct{}{}
	return n, nil
}

// Write is called by the device's per-peer receive goroutines with packets
// whose inner source the device has already checked against the peer. It
// needs no closed check: device.Close stops those goroutines before it
// returns.
func (p *pipe) Write(bufs [][]byte, offset int) (int, error) {
	p.deliver.Deliver(transport.PeerAny, bufs, offset)
	return len(bufs), nil
}

func (p *pipe) File() *os.File { return nil }

func (p *pipe) MTU() (int, error) { return p.mtu, nil }

func (p *pipe) Name() (string, error) { return p.name, nil }

func (p *pipe) Events() <-chan tun.Event { return p.events }

// BatchSize matches the UDP bind's, so the device reads as many packets from
// the pipe as it sends in one sendmmsg.
func (p *pipe) BatchSize() int { return conn.IdealBatchSize }

// Close is called by device.Close before it waits for the device's goroutines.
func (p *pipe) Close() error {
	p.closeOnce.Do(func() {
		close(p.closed)
		close(p.events)
	})
	return nil
}
