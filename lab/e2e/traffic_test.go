package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"regexp"
	"strconv"
	"time"

	"github.com/snorkel-net/snorkel/lab/topo"
)

// stream returns a deterministic pseudo-random byte stream: it does not
// compress, repeat or align with any packet size, so a dropped, duplicated,
// reordered or corrupted segment changes the digest.
func stream(seed uint64) io.Reader {
	var s [32]byte
	binary.LittleEndian.PutUint64(s[:], seed)
	return rand.NewChaCha8(s)
}

// tcpResult is what the receiving end of a transfer saw.
type tcpResult struct {
	n      int64
	digest [sha256.Size]byte
}

// transferTCP sends n bytes of stream(seed) from a socket in `from` to
// dst, served by a listener in `to` on dst's port, as sendTCP does.
func transferTCP(ctx context.Context, from, to *topo.NS, dst netip.AddrPort, n int64, seed uint64) error {
	_, err := sendTCP(ctx, from, to, dst, io.LimitReader(stream(seed), n))
	return err
}

// sendTCP sends src up to its EOF from a socket in `from` to dst, served by
// a listener in `to` on dst's port, hashing on both ends; the receiver
// reports its count and digest back over the same connection. It returns
// how many bytes it sent, and an error unless both ends agree. The
// listener takes every address, as dst may be one the gateway translates
// to `to`'s own.
func sendTCP(ctx context.Context, from, to *topo.NS, dst netip.AddrPort, src io.Reader) (int64, error) {
	ln, err := to.Listen("tcp", anyAddr(dst.Port()))
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(time.Minute)
	}
	srvErr := make(chan error, 1)
	go func() { srvErr <- receiveAndReport(ln, deadline) }()

	c, err := from.DialContext(ctx, "tcp", dst.String())
	if err != nil {
		return 0, fmt.Errorf("dial %s: %w", dst, err)
	}
	defer c.Close()
	c.SetDeadline(deadline)
	h := sha256.New()
	sent, err := io.Copy(io.MultiWriter(c, h), src)
	if err != nil {
		return sent, fmt.Errorf("sent %d bytes: %w", sent, err)
	}
	if err := c.(*net.TCPConn).CloseWrite(); err != nil {
		return sent, err
	}
	var reply [8 + sha256.Size]byte
	if _, err := io.ReadFull(c, reply[:]); err != nil {
		return sent, fmt.Errorf("no report from the receiver: %w (receiver: %v)", err, <-srvErr)
	}
	if err := <-srvErr; err != nil {
		return sent, err
	}
	got := tcpResult{n: int64(binary.BigEndian.Uint64(reply[:8])), digest: [sha256.Size]byte(reply[8:])}
	want := tcpResult{n: sent, digest: [sha256.Size]byte(h.Sum(nil))}
	if got != want {
		return sent, fmt.Errorf("receiver got %d bytes with SHA-256 %x; sent %d bytes with SHA-256 %x", got.n, got.digest, want.n, want.digest)
	}
	return sent, nil
}

func receiveAndReport(ln net.Listener, deadline time.Time) error {
	c, err := ln.Accept()
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(deadline)
	h := sha256.New()
	n, err := io.Copy(h, c)
	if err != nil {
		return fmt.Errorf("receiver: after %d bytes: %w", n, err)
	}
	var reply [8 + sha256.Size]byte
	binary.BigEndian.PutUint64(reply[:8], uint64(n))
	h.Sum(reply[8:8])
	_, err = c.Write(reply[:])
	return err
}

// udpEcho is the result of echoDatagrams.
type udpEcho struct {
	sent, echoed int
}

// echoWait is how long echoDatagrams waits for the reply to one datagram
// before it sends the next, and at the end for the replies still missing.
// A reply that comes later than its own wait still counts: a loaded host
// delays replies without losing them.
const echoWait = 2 * time.Second

// echoDatagrams sends count datagrams of the given sizes (cycled) from
// `from` to dst, served by an echo server it runs in `to` on dst's port
// (every address), one at a time, and compares every reply with what was
// sent under its sequence number. A datagram whose reply has not come when
// the last one's wait ends counts as lost; a reply that differs is an
// error.
func echoDatagrams(ctx context.Context, from, to *topo.NS, dst netip.AddrPort, sizes []int, count int, seed uint64) (udpEcho, error) {
	var res udpEcho
	srv, err := to.ListenPacket("udp", anyAddr(dst.Port()))
	if err != nil {
		return res, err
	}
	defer srv.Close()
	go func() {
		buf := make([]byte, 65536)
		for {
			n, addr, err := srv.ReadFrom(buf)
			if err != nil {
				return
			}
			srv.WriteTo(buf[:n], addr)
		}
	}()
	c, err := from.DialContext(ctx, "udp", dst.String())
	if err != nil {
		return res, err
	}
	defer c.Close()
	src := stream(seed)
	sent := make([][]byte, count)
	echoed := make([]bool, count)
	buf := make([]byte, 65536)
	// read takes replies until done says so or the deadline passes.
	read := func(deadline time.Time, done func() bool) error {
		c.SetReadDeadline(deadline)
		for !done() {
			n, err := c.Read(buf)
			if errors.Is(err, os.ErrDeadlineExceeded) {
				return nil
			}
			if err != nil {
				return err
			}
			if n < 4 {
				return fmt.Errorf("a %d-byte reply is too short to carry a sequence number", n)
			}
			seq := int(binary.BigEndian.Uint32(buf))
			if seq >= res.sent {
				return fmt.Errorf("reply with sequence number %d, beyond the %d sent", seq, res.sent)
			}
			if !bytes.Equal(buf[:n], sent[seq]) {
				return fmt.Errorf("datagram %d came back different: sent %d bytes, got %d", seq, len(sent[seq]), n)
			}
			if !echoed[seq] {
				echoed[seq] = true
				res.echoed++
			}
		}
		return nil
	}
	for i := range count {
		if ctx.Err() != nil {
			return res, ctx.Err()
		}
		size := sizes[i%len(sizes)]
		d := make([]byte, size)
		binary.BigEndian.PutUint32(d, uint32(i))
		io.ReadFull(src, d[4:])
		sent[i] = d
		if _, err := c.Write(d); err != nil {
			return res, fmt.Errorf("datagram %d (%d bytes): %w", i, size, err)
		}
		res.sent++
		if err := read(time.Now().Add(echoWait), func() bool { return echoed[i] }); err != nil {
			return res, fmt.Errorf("datagram %d: %w", i, err)
		}
	}
	if err := read(time.Now().Add(echoWait), func() bool { return res.echoed == res.sent }); err != nil {
		return res, fmt.Errorf("after the last datagram: %w", err)
	}
	return res, nil
}

// anyAddr is every IPv4 address of a namespace at port.
func anyAddr(port uint16) string {
	return netip.AddrPortFrom(netip.IPv4Unspecified(), port).String()
}

var pingReceived = regexp.MustCompile(`(\d+) packets transmitted, (\d+) received`)

var pingReply = regexp.MustCompile(`(?m)^\d+ bytes from \S+: icmp_seq=(\d+) `)

// pingEach pings dst from ns, count echo requests 0.2 s apart, and returns
// which of them got no reply, with ping's output. With -c alone, ping gives
// the last reply twice the slowest round trip so far (at least the
// interval) before it exits without it: on a loaded host that is not
// enough for the gateways to answer. With -w, ping waits until count
// replies have come, sending more meanwhile, for up to settle: a request
// counts as unanswered only if no reply to it came before ping had count
// replies, so a slow reply passes and a lost one does not.
func pingEach(ctx context.Context, ns *topo.NS, dst netip.Addr, count int) (unanswered []int, out string) {
	args := []string{"-n", "-c", strconv.Itoa(count), "-i", "0.2", "-w", strconv.Itoa(int(settle / time.Second)), dst.String()}
	b, _ := ns.Command(ctx, "ping", args...).CombinedOutput()
	out = string(b)
	answered := map[int]bool{}
	for _, m := range pingReply.FindAllStringSubmatch(out, -1) {
		seq, _ := strconv.Atoi(m[1])
		answered[seq] = true
	}
	for seq := 1; seq <= count; seq++ {
		if !answered[seq] {
			unanswered = append(unanswered, seq)
		}
	}
	return unanswered, out
}

// ping runs ping(8) in ns and returns how many of count echo requests were
// answered, with ping's output.
func ping(ctx context.Context, ns *topo.NS, args ...string) (sent, received int, out string) {
	b, _ := ns.Command(ctx, "ping", append([]string{"-n"}, args...)...).CombinedOutput()
	out = string(b)
	if m := pingReceived.FindStringSubmatch(out); m != nil {
		sent, _ = strconv.Atoi(m[1])
		received, _ = strconv.Atoi(m[2])
	}
	return sent, received, out
}
