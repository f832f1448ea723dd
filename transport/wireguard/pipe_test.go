package wireguard

import (
	"bytes"
	"errors"
	"net/netip"
	"testing"

	"github.com/snorkel-net/snorkel/transport"
)

// readLoop plays the device's TUN reader with a read batch of size n and
// reports each Read's packets on the returned channel.
func readLoop(p *pipe, n int) <-chan [][]byte {
	out := make(chan [][]byte, 64)
	go func() {
		defer close(out)
		bufs := make([][]byte, n)
		for i := range bufs {
			bufs[i] = make([]byte, 2048)
		}
		sizes := make([]int, n)
		for {
			k, err := p.Read(bufs, sizes, 16)
			if err != nil {
				return
			}
			got := make([][]byte, 0, k)
			for i := range k {
				got = append(got, append([]byte(nil), bufs[i][16:16+sizes[i]]...))
			}
			out <- got
		}
	}()
	return out
}

func TestPipeSplitsBatchesLargerThanTheRead(t *testing.T) {
	drops := newDropCounters(0)
	p := newPipe("t", DefaultMTU, newCollector(), drops)
	reads := readLoop(p, 4)

	bufs := newBatch(10)
	var want [][]byte
	for i := range bufs {
		size := 100
		if i == 5 {
			size = 3000 // larger than the reader's 2048-byte buffers
		}
		bufs[i] = ipv4UDP(bufs[i], transport.Headroom, hostA, hostB, size, uint32(i))
		if i != 5 {
			want = append(want, append([]byte(nil), bufs[i][transport.Headroom:]...))
		}
	}
	if err := p.send(bufs, transport.Headroom); err != nil {
		t.Fatal(err)
	}
	var got [][]byte
	var sizes []int
	for len(got) < len(want) {
		r := <-reads
		sizes = append(sizes, len(r))
		got = append(got, r...)
	}
	for i := range want {
		if !bytes.Equal(got[i], want[i]) {
			t.Fatalf("packet %d differs", i)
		}
	}
	for _, n := range sizes {
		if n > 4 {
			t.Errorf("a Read returned %d packets into 4 buffers", n)
		}
	}
	if c := dropCount(drops.snapshot(), transport.PeerAny, ReasonOversize); c != 1 {
		t.Errorf("counted %d oversize drops, want 1", c)
	}
	p.Close()
	if _, ok := <-reads; ok {
		t.Error("Read kept returning packets after Close")
	}
	if err := p.send(bufs, transport.Headroom); !errors.Is(err, transport.ErrClosed) {
		t.Errorf("send after Close = %v, want transport.ErrClosed", err)
	}
}

func TestPipeSendDoesNotAllocate(t *testing.T) {
	p := newPipe("t", DefaultMTU, newCollector(), newDropCounters(0))
	defer p.Close()
	go func() {
		bufs := make([][]byte, 128)
		for i := range bufs {
			bufs[i] = make([]byte, 2048)
		}
		sizes := make([]int, 128)
		for {
			if _, err := p.Read(bufs, sizes, 16); err != nil {
				return
			}
		}
	}()
	// A full batch is lent, a small one copied.
	for _, n := range []int{128, ownedBatchMax} {
		bufs := newBatch(n)
		for i := range bufs {
			bufs[i] = ipv4UDP(bufs[i], transport.Headroom, hostA, netip.MustParseAddr("10.2.0.1"), 1400, uint32(i))
		}
		allocs := testing.AllocsPerRun(200, func() {
			if err := p.send(bufs, transport.Headroom); err != nil {
				t.Fatal(err)
			}
		})
		if allocs != 0 {
			t.Errorf("Send of a %d-packet batch allocates %v times", n, allocs)
		}
	}
}

// TestPipeSmallBatchesAreCopied: a batch of up to ownedBatchMax packets is
// the sender's again as soon as send returns, so overwriting it changes
// nothing the device reads, and the packets keep their order with the lent
// batches around them.
func TestPipeSmallBatchesAreCopied(t *testing.T) {
	p := newPipe("t", DefaultMTU, newCollector(), newDropCounters(0))
	defer p.Close()
	reads := readLoop(p, 128)
	var want [][]byte
	seq := uint32(0)
	for _, n := range []int{1, ownedBatchMax, ownedBatchMax + 1, 3, 40, 2} {
		bufs := newBatch(n)
		for i := range bufs {
			bufs[i] = ipv4UDP(bufs[i], transport.Headroom, hostA, hostB, 200, seq)
			seq++
			want = append(want, bytes.Clone(bufs[i][transport.Headroom:]))
		}
		if err := p.send(bufs, transport.Headroom); err != nil {
			t.Fatal(err)
		}
		for i := range bufs {
			clear(bufs[i])
		}
	}
	var got [][]byte
	for len(got) < len(want) {
		got = append(got, <-reads...)
	}
	for i := range want {
		if !bytes.Equal(got[i], want[i]) {
			t.Fatalf("packet %d of %d differs from what was sent", i, len(want))
		}
	}
}
