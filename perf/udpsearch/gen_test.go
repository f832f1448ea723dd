package udpsearch

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/netip"
	"syscall"
	"testing"
	"time"
)

// settle bounds the tests' waits for things that take milliseconds on an
// idle machine: under `go test ./...` on two busy cores they can take
// seconds, and a deadline is there to stop a hang, not to time the code.
const settle = 60 * time.Second

// startSink serves a Sink on a loopback port until ctx is done and returns
// its address. Its control listener takes the TCP port of the UDP port's
// number, as the client expects; another process may hold that TCP port,
// so a taken one means another pair.
func startSink(ctx context.Context, t *testing.T) netip.AddrPort {
	t.Helper()
	for range 100 {
		udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			t.Fatal(err)
		}
		ctl, err := net.Listen("tcp", udp.LocalAddr().String())
		if errors.Is(err, syscall.EADDRINUSE) {
			udp.Close()
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		var sink Sink
		go sink.Serve(ctx, udp, ctl)
		return udp.LocalAddr().(*net.UDPAddr).AddrPort()
	}
	t.Fatal("no loopback port free for both UDP and TCP in 100 tries")
	return netip.AddrPort{}
}

func TestUDPSourceAndSinkCountTheSameDatagramsOverLoopback(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), settle)
	defer cancel()
	server := startSink(ctx, t)
	src, err := dialSource(ctx, server, Payload)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()

	// Paced well below what loopback carries, nothing is lost, and the
	// pacer never runs ahead of its rate. A sink left without a CPU on a
	// loaded machine may still overflow its socket buffer, as UDP
	// allows: a trial that lost some is tried again, and a sink that
	// miscounts fails every try.
	const rate = 20000
	var tr Trial
	for try := 1; ; try++ {
		tr, err = src.trial(ctx, rate, 300*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		if tr.Received == tr.Sent || try == 3 {
			break
		}
		t.Logf("paced trial %d: %d of %d datagrams received; trying again", try, tr.Received, tr.Sent)
	}
	if tr.Sent < 1000 || tr.Received != tr.Sent || tr.SendErrors != 0 || tr.Loss() != 0 {
		t.Errorf("paced trial: %+v, want over 1000 sent and all received", tr)
	}
	if due := rate*tr.Seconds + 1; float64(tr.Sent) > due {
		t.Errorf("paced to %d/s: %d sent in %.3fs, more than the %.0f due", rate, tr.Sent, tr.Seconds, due)
	}

	// Trials after it on the same control connection count only their
	// own datagrams, from zero.
	tr2, err := src.trial(ctx, 5000, 200*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if tr2.Received > tr2.Sent || tr2.Sent > tr.Sent {
		t.Errorf("second trial: %+v after %+v", tr2, tr)
	}
	fast, err := src.trial(ctx, 0, 200*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if fast.Rate != 0 || fast.Sent <= tr2.Sent || fast.Received == 0 || fast.Received > fast.Sent {
		t.Errorf("unpaced trial: %+v, want more sent than the paced trial and some received", fast)
	}
}

func TestUDPSearchOverLoopbackReportsWhatItsTrialsSaw(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), settle)
	defer cancel()
	server := startSink(ctx, t)
	r, err := Run(ctx, ClientOptions{Server: server, Trial: 200 * time.Millisecond,
		Options: Options{MaxTrials: 3}})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Trials) == 0 || len(r.Trials) > 3 || r.Trials[0].Rate != 0 || r.Payload != Payload || r.TrialSeconds != 0.2 {
		t.Errorf("search %+v: want an unpaced probe and at most 3 trials of 0.2 s", r)
	}
	b, _ := json.Marshal(r)
	back, err := Parse(b)
	if err != nil {
		t.Fatalf("its own report refused: %v", err)
	}
	if back.Rate != r.Rate || back.Found != r.Found {
		t.Errorf("round trip %+v, want %+v", back, r)
	}
}
