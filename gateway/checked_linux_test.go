package gateway

import (
	"encoding/binary"
	"fmt"
	"os"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/snorkel-net/snorkel/packet"
	"github.com/snorkel-net/snorkel/transport"
)

// tcpRun returns n consecutive full data segments of one c2Pod → c1Pod
// flow, each of size payload bytes, with valid checksums.
func tcpRun(n, size int) [][]byte {
	var segs [][]byte
	for k := range n {
		b := ipv4TCP(c2Pod, c1Pod, 40+size, false)
		binary.BigEndian.PutUint32(b[24:], uint32(k*size))
		for i := 40; i < len(b); i++ {
			b[i] = byte(k*7 + i)
		}
		b[36], b[37] = 0, 0
		binary.BigEndian.PutUint16(b[36:], ^packet.Checksum(b[20:], packet.PseudoHeaderChecksum(6, b[12:16], b[16:20], len(b)-20)))
		segs = append(segs, b)
	}
	return segs
}

// socketTUN is an offloadTUN whose writes go to one end of a socket pair
// instead of a TUN device; the other end, whose descriptor it returns,
// reads each write as one message: the virtio-net header and the packet.
func socketTUN(t *testing.T) (*offloadTUN, int) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	w := os.NewFile(uintptr(fds[0]), "tun")
	t.Cleanup(func() { w.Close(); unix.Close(fds[1]) })
	rc, err := w.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	d := &offloadTUN{Device: &replayDevice{}, rc: rc}
	d.writeFn = d.write
	return d, fds[1]
}

// written reads the writes made so far to a socketTUN, from its reading
// end r, and returns, for each, the segments it carries: its length over
// the GSO size it was given, or 1.
func written(t *testing.T, r int) []int {
	t.Helper()
	var out []int
	buf := make([]byte, 1<<17)
	for {
		n, err := unix.Read(r, buf)
		if err == unix.EAGAIN {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		if n < virtioNetHdrLen {
			t.Fatalf("a write of %d bytes, shorter than its virtio-net header", n)
		}
		if buf[1] == unix.VIRTIO_NET_HDR_GSO_NONE {
			out = append(out, 1)
			continue
		}
		hdr, size := int(binary.NativeEndian.Uint16(buf[2:])), int(binary.NativeEndian.Uint16(buf[4:]))
		out = append(out, (n-virtioNetHdrLen-hdr+size-1)/size)
	}
}

// TestDeliverJoinsUnsummedOnlyWhatARemoteChecked: the segments of a remote
// that checks what it sends (checkedSegments) are joined for the TUN
// device without their checksums being verified again; those of any other
// remote are verified, and one that fails is written alone, for the
// kernel to drop.
func TestDeliverJoinsUnsummedOnlyWhatARemoteChecked(t *testing.T) {
	for _, tc := range []struct {
		checked bool
		want    string
	}{
		{false, "[2 1 1]"},
		// Only a sender that does not check could send the corrupted
		// segment; such a remote's segments all join.
		{true, "[4]"},
	} {
		t.Run(fmt.Sprintf("checkedSegments=%v", tc.checked), func(t *testing.T) {
			c := validConfig()
			c.Remotes[0].CheckedSegments = tc.checked
			s, err := c.build()
			if err != nil {
				t.Fatal(err)
			}
			g := newGateway(s, Options{})
			g.attach(&nullTransport{}, "")
			d, r := socketTUN(t)
			attachDevice(g, d)
			segs := tcpRun(4, 1000)
			segs[2][len(segs[2])-1]++
			var bufs [][]byte
			for _, sg := range segs {
				bufs = append(bufs, deliverBuf(sg))
			}
			g.Deliver(0, bufs, transport.Headroom)
			if got := fmt.Sprint(written(t, r)); got != tc.want {
				t.Errorf("wrote packets of %s segments, want %s", got, tc.want)
			}
		})
	}
}
