package perf

import (
	"bytes"
	"errors"
	"math"
	"testing"

	"github.com/snorkel-net/snorkel/perf/internal/fixture"
)

// The fixtures are real `iperf3 -c ... -J` outputs of iperf 3.12: a 2 s
// flow over loopback, a 3 s flow between lab pods through Snorkel's
// WireGuard gateways, and a client that found no server.
func TestParseIperfTCPReadsReceivedRateRetransmitsAndCPU(t *testing.T) {
	for _, tc := range []struct {
		file        string
		receivedBPS float64
		retransmits int
		senderCPU   float64
		receiverCPU float64
		seconds     float64
	}{
		{"iperf3-tcp.json", 7388194117.896915, 39, 22.653438947995134, 20.231463436572422, 2.001155},
		{"iperf3-tcp-lab.json", 961673083.8506036, 0, 6.263240033306797, 6.83645505099783, 3.0},
	} {
		t.Run(tc.file, func(t *testing.T) {
			r, err := ParseIperfTCP(fixture.Read(t, tc.file))
			if err != nil {
				t.Fatal(err)
			}
			if r.ReceivedBPS != tc.receivedBPS || r.Retransmits != tc.retransmits ||
				r.SenderCPU != tc.senderCPU || r.ReceiverCPU != tc.receiverCPU || r.Streams != 1 {
				t.Errorf("got %+v, want received %v, retransmits %d, CPU %v/%v, 1 stream", r, tc.receivedBPS, tc.retransmits, tc.senderCPU, tc.receiverCPU)
			}
			if math.Abs(r.Seconds-tc.seconds) > 0.01 {
				t.Errorf("seconds %v, want about %v", r.Seconds, tc.seconds)
			}
			if r.SentBPS < r.ReceivedBPS*0.9 {
				t.Errorf("sent %v is far below received %v: fields swapped?", r.SentBPS, r.ReceivedBPS)
			}
			v := r.Values()
			if v[MetricThroughput.Name] != tc.receivedBPS || v[MetricRetransmits.Name] != float64(tc.retransmits) {
				t.Errorf("values %v do not carry the received rate and retransmits", v)
			}
		})
	}
}

func TestParseIperfTCPReportsIperfsOwnError(t *testing.T) {
	_, err := ParseIperfTCP(fixture.Read(t, "iperf3-refused.json"))
	if !errors.Is(err, ErrIperf) {
		t.Fatalf("err = %v, want ErrIperf", err)
	}
	if !bytes.Contains([]byte(err.Error()), []byte("Connection refused")) {
		t.Errorf("error %q does not carry iperf3's message", err)
	}
}

func TestParseIperfTCPRefusesWhatItCannotTrust(t *testing.T) {
	good := fixture.Read(t, "iperf3-tcp.json")
	for name, in := range map[string][]byte{
		"empty":     nil,
		"truncated": good[:len(good)/2],
		"udp test":  bytes.Replace(good, []byte(`"protocol":	"TCP"`), []byte(`"protocol":	"UDP"`), 1),
		"no end":    []byte(`{"start":{"test_start":{"protocol":"TCP","num_streams":1}},"end":{}}`),
	} {
		t.Run(name, func(t *testing.T) {
			if r, err := ParseIperfTCP(in); err == nil {
				t.Errorf("parsed %+v, want an error", r)
			}
		})
	}
}

// The fixtures are real outputs of iperf 3.12 over loopback: -R, -P 10
// -w 256K, and both.
func TestParseIperfTCPReadsParallelAndReversedRuns(t *testing.T) {
	for _, tc := range []struct {
		file        string
		streams     int
		reverse     bool
		receivedBPS float64
		senderCPU   float64
		receiverCPU float64
	}{
		// Reversed, the client (iperf3's host) receives: its CPU is the
		// receiver's.
		{"iperf3-tcp-reverse.json", 1, true, 16536860322.224878, 98.05836400503273, 35.9165323606752},
		{"iperf3-tcp-10.json", 10, false, 0, 0, 0},
		{"iperf3-tcp-10-reverse.json", 10, true, 12906692797.413055, 0, 0},
	} {
		t.Run(tc.file, func(t *testing.T) {
			r, err := ParseIperfTCP(fixture.Read(t, tc.file))
			if err != nil {
				t.Fatal(err)
			}
			if r.Streams != tc.streams || r.Reverse != tc.reverse {
				t.Errorf("%d streams, reverse %v; want %d, %v", r.Streams, r.Reverse, tc.streams, tc.reverse)
			}
			if r.ReceivedBPS <= 1e9 || (tc.receivedBPS != 0 && r.ReceivedBPS != tc.receivedBPS) {
				t.Errorf("received %v, want %v (all flows summed)", r.ReceivedBPS, tc.receivedBPS)
			}
			if tc.senderCPU != 0 && (r.SenderCPU != tc.senderCPU || r.ReceiverCPU != tc.receiverCPU) {
				t.Errorf("CPU sender %v receiver %v, want %v and %v", r.SenderCPU, r.ReceiverCPU, tc.senderCPU, tc.receiverCPU)
			}
		})
	}
}
