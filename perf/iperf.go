package perf

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"time"

	"github.com/snorkel-net/snorkel/lab/topo"
)

// IperfTCP is what an iperf3 TCP client run reports.
type IperfTCP struct {
	// ReceivedBPS is the payload rate the server received, the number a
	// throughput comparison uses: what was sent but lost does not count.
	ReceivedBPS float64
	SentBPS     float64
	Retransmits int
	Seconds     float64
	// SenderCPU and ReceiverCPU are the iperf3 processes' own CPU, in
	// percent of one core.
	SenderCPU, ReceiverCPU float64
	Streams                int
	// Reverse is set when the server sent and the client received
	// (iperf3 -R).
	Reverse bool
}

// iperfJSON is the part of `iperf3 -J` output that IperfTCP reads.
type iperfJSON struct {
	Start struct {
		TestStart struct {
			Protocol   string `json:"protocol"`
			NumStreams int    `json:"num_streams"`
			Reverse    int    `json:"reverse"`
		} `json:"test_start"`
	} `json:"start"`
	End struct {
		SumSent struct {
			Seconds       float64 `json:"seconds"`
			BitsPerSecond float64 `json:"bits_per_second"`
			Retransmits   int     `json:"retransmits"`
		} `json:"sum_sent"`
		SumReceived struct {
			Seconds       float64 `json:"seconds"`
			BitsPerSecond float64 `json:"bits_per_second"`
		} `json:"sum_received"`
		CPU struct {
			HostTotal   float64 `json:"host_total"`
			RemoteTotal float64 `json:"remote_total"`
		} `json:"cpu_utilization_percent"`
	} `json:"end"`
	Error string `json:"error"`
}

// ErrIperf is wrapped by ParseIperfTCP when iperf3 itself reports a failure.
var ErrIperf = errors.New("iperf3 failed")

// ParseIperfTCP reads the output of `iperf3 -c ... -J` for a TCP test.
func ParseIperfTCP(b []byte) (IperfTCP, error) {
	var j iperfJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return IperfTCP{}, fmt.Errorf("perf: iperf3 JSON: %w", err)
	}
	if j.Error != "" {
		return IperfTCP{}, fmt.Errorf("perf: %w: %s", ErrIperf, j.Error)
	}
	if p := j.Start.TestStart.Protocol; p != "TCP" {
		return IperfTCP{}, fmt.Errorf("perf: iperf3 JSON: protocol %q, want TCP", p)
	}
	if j.End.SumReceived.Seconds <= 0 {
		return IperfTCP{}, errors.New("perf: iperf3 JSON: no end.sum_received; was the test cut short?")
	}
	r := IperfTCP{
		ReceivedBPS: j.End.SumReceived.BitsPerSecond,
		SentBPS:     j.End.SumSent.BitsPerSecond,
		Retransmits: j.End.SumSent.Retransmits,
		Seconds:     j.End.SumReceived.Seconds,
		SenderCPU:   j.End.CPU.HostTotal,
		ReceiverCPU: j.End.CPU.RemoteTotal,
		Streams:     j.Start.TestStart.NumStreams,
		Reverse:     j.Start.TestStart.Reverse != 0,
	}
	// The client's CPU is the host's; reversed, the client receives.
	if r.Reverse {
		r.SenderCPU, r.ReceiverCPU = r.ReceiverCPU, r.SenderCPU
	}
	return r, nil
}

// Values returns the measurement's metrics.
func (r IperfTCP) Values() map[string]float64 {
	return map[string]float64{
		MetricThroughput.Name:  r.ReceivedBPS,
		MetricRetransmits.Name: float64(r.Retransmits),
		MetricSenderCPU.Name:   r.SenderCPU,
		MetricReceiverCPU.Name: r.ReceiverCPU,
	}
}

// startServer starts a traffic server in ns as a process of t and waits
// until it listens on TCP port port.
func startServer(ctx context.Context, t *topo.Topology, ns *topo.NS, name string, port int, bin string, args ...string) (*topo.Process, error) {
	p, err := ns.Start(name, bin, args...)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		// ss, not a probe connection: iperf3 would take a probe for a test
		// client and log an error.
		out, err := ns.Run(ctx, "ss", "-Hltn", "sport = :"+strconv.Itoa(port))
		if err == nil && len(bytes.TrimSpace(out)) > 0 {
			return p, nil
		}
		if !p.Alive() {
			return nil, fmt.Errorf("perf: %s in %s exited: %v; log %s", name, ns, p.ExitError(), t.LogPath(p.Name))
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("perf: %s in %s not listening on TCP port %d after 10s; log %s", name, ns, port, t.LogPath(p.Name))
		}
		if err := sleep(ctx, 100*time.Millisecond); err != nil {
			return nil, err
		}
	}
}

// runIperfTCP runs a TCP iperf3 client in ns toward server for d, with
// extra arguments (flows, direction), and returns its JSON output. The
// output is returned even when the run failed, since iperf3 writes its
// error into it.
func runIperfTCP(ctx context.Context, ns *topo.NS, server netip.Addr, d time.Duration, extra ...string) ([]byte, error) {
	// iperf3 gives up on its own only when the connection fails; bound a
	// stalled flow too.
	ctx, cancel := context.WithTimeout(ctx, d+30*time.Second)
	defer cancel()
	args := append([]string{"-c", server.String(), "-p", strconv.Itoa(iperfPort), "-t", strconv.Itoa(int(d / time.Second)), "-J"}, extra...)
	cmd := ns.Command(ctx, "iperf3", args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("perf: iperf3 -c %s in %s: %w: %s", server, ns, err, bytes.TrimSpace(stderr.Bytes()))
	}
	return out, nil
}
