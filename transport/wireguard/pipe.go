package wireguard

import (
	"os"
	"sync"

	"github.com/snorkel-net/snorkel/transport"
	"golang.zx2c4.com/wireguard/conn"
	"golang.zx2c4.com/wireguard/tun"
)

// sendBatch is one Send call in flight. A borrowed batch holds the sender's
// buffers: the device's TUN reader copies the packets out and then signals
// done, after which the sender owns its buffers again. An owned batch holds
// copies in its own storage, so its sender does not wait; the reader returns
// it to the pool. sendBatches are pooled so that Send does not allocate.
type sendBatch struct {
	bufs   [][]byte
	offset int
	next   int // index of the first packet not yet copied
	done   chan struct{}

	owned bool
	data  []byte   // an owned batch's packets, back to back
	own   [][]byte // an owned batch's packets, slices of data
}

// ownedBatchMax is the largest batch send copies rather than lends. A few
// small packets cost less to copy than the sender's wait for the reader,
// two goroutine switches per batch, which bounded the rate of small
// packets; a full batch of large ones is the other way round.
const ownedBatchMax = 8

// ownedBatches is how many owned batches a pipe has: the sender lends its
// buffers when none is free, so they bound the memory and never allocate.
const ownedBatches = 4

// fill makes b an owned batch of copies of bufs[i][offset:].
func (b *sendBatch) fill(bufs [][]byte, offset int) {
	b.own, b.data = b.own[:0], b.data[:0]
	for _, pkt := range bufs {
		b.data = append(b.data, pkt[offset:]...)
	}
	at := 0
	for _, pkt := range bufs {
		n := len(pkt) - offset
		b.own = append(b.own, b.data[at:at+n:at+n])
		at += n
	}
	b.bufs, b.offset, b.next = b.own, 0, 0
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
	free      chan *sendBatch // the owned batches not in flight
	closed    chan struct{}
	closeOnce sync.Once
	events    chan tun.Event

	// pending is a batch larger than the device's read batch; only the
	// device's single TUN reader goroutine touches it.
	pending *sendBatch
}

var _ tun.Device = (*pipe)(nil)

func newPipe(name string, mtu int, d transport.Deliverer, drops *dropCounters) *pipe {
	free := make(chan *sendBatch, ownedBatches)
	for range ownedBatches {
		free <- &sendBatch{owned: true, data: make([]byte, 0, ownedBatchMax*mtu)}
	}
	return &pipe{
		free:    free,
		name:    name,
		mtu:     mtu,
		deliver: d,
		drops:   drops,
		in:      make(chan *sendBatch),
		closed:  make(chan struct{}),
		events:  make(chan tun.Event),
	}
}

// send hands bufs to the device. A batch of up to ownedBatchMax packets it
// copies into a free owned batch, when one is free, and returns once the
// reader has taken it; otherwise it lends bufs, and waits until the reader
// has copied them.
func (p *pipe) send(bufs [][]byte, offset int) error {
	if len(bufs) <= ownedBatchMax {
		select {
		case b := <-p.free:
			b.fill(bufs, offset)
			select {
			case p.in <- b:
				return nil
			case <-p.closed:
				p.free <- b
				return transport.ErrClosed
			}
		default:
		}
	}
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
	if b.owned {
		p.free <- b
	} else {
		b.done <- struct{}{}
	}
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
