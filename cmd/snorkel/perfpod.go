package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/snorkel-net/snorkel/perf"
	"github.com/snorkel-net/snorkel/perf/udpsearch"
)

const perfPodUsage = "usage: snorkel perf-pod rr-server|rr-client|udp-sink|udp-search [flags]"

// runPerfPod is `snorkel perf-pod`, the traffic tools the benchmark runs
// inside pod namespaces. It is not meant to be run by hand. Clients print
// their report as JSON on standard output.
func runPerfPod(args []string) error {
	if len(args) == 0 {
		return errors.New(perfPodUsage)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	fs := flag.NewFlagSet("perf-pod "+args[0], flag.ContinueOnError)
	switch args[0] {
	case "rr-server":
		listen := fs.String("listen", "", "address:port to serve request/response on")
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		ln, err := net.Listen("tcp", *listen)
		if err != nil {
			return fmt.Errorf("rr-server: --listen: %w", err)
		}
		return perf.ServeRR(ctx, ln)
	case "rr-client":
		server := fs.String("server", "", "address:port of the rr-server")
		duration := fs.Duration("duration", 10*time.Second, "how long to run transactions")
		size := fs.Int("size", 1, "bytes of each request and response")
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", *server)
		if err != nil {
			return fmt.Errorf("rr-client: --server: %w", err)
		}
		defer c.Close()
		r, err := perf.RunRR(ctx, c, *size, *duration)
		if err != nil {
			return err
		}
		return json.NewEncoder(os.Stdout).Encode(r)
	case "udp-sink":
		listen := fs.String("listen", "", "address:port to count datagrams on (UDP) and answer sources on (TCP)")
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		ap, err := netip.ParseAddrPort(*listen)
		if err != nil {
			return fmt.Errorf("udp-sink: --listen: %w", err)
		}
		udp, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(ap))
		if err != nil {
			return fmt.Errorf("udp-sink: %w", err)
		}
		ctl, err := net.Listen("tcp", *listen)
		if err != nil {
			return fmt.Errorf("udp-sink: %w", err)
		}
		var s udpsearch.Sink
		return s.Serve(ctx, udp, ctl)
	case "udp-search":
		server := fs.String("server", "", "address:port of the udp-sink")
		trial := fs.Duration("trial", time.Second, "how long each trial sends")
		payload := fs.Int("payload", udpsearch.Payload, "bytes of payload per datagram")
		bound := fs.Float64("bound", 0, "highest rate to try, datagrams per second; 0 takes it from an unpaced probe")
		maxLoss := fs.Float64("max-loss", udpsearch.MaxLoss, "loss in percent a passing trial may have")
		maxTrials := fs.Int("max-trials", udpsearch.MaxTrials, "most trials, the probe included")
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		ap, err := netip.ParseAddrPort(*server)
		if err != nil {
			return fmt.Errorf("udp-search: --server: %w", err)
		}
		if *maxLoss <= 0 || *maxLoss >= 100 {
			return fmt.Errorf("udp-search: --max-loss %g: give a percentage in (0, 100)", *maxLoss)
		}
		if *maxTrials < 1 {
			return fmt.Errorf("udp-search: --max-trials %d: give at least 1", *maxTrials)
		}
		r, err := udpsearch.Run(ctx, udpsearch.ClientOptions{Server: ap, Trial: *trial, Payload: *payload,
			Options: udpsearch.Options{Bound: *bound, MaxLoss: *maxLoss, MaxTrials: *maxTrials}})
		if err != nil {
			return err
		}
		return json.NewEncoder(os.Stdout).Encode(r)
	}
	return fmt.Errorf("unknown tool %q; %s", args[0], perfPodUsage)
}
