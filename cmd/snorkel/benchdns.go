package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/snorkel-net/snorkel/perf/dnsperf"
)

// defaultCoreDNS is where `make tools` builds CoreDNS.
const defaultCoreDNS = ".cache/bin/coredns-v1.15.0"

// runBenchmarkDNS is `snorkel benchmark dns`: dnsd against CoreDNS under
// dnsperf on loopback.
func runBenchmarkDNS(args []string) error {
	fs := flag.NewFlagSet("benchmark dns", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `usage: snorkel benchmark dns [flags]

Runs dnsd (snorkel dnsd --static) and CoreDNS (its file plugin) on loopback
with the same names and answers, and sends both the same queries with
dnsperf in interleaved repetitions: queries per second at full speed, the
servers' CPU per query, and p50/p99/p99.9 latency at a fixed rate (from
dnsperf -v). Writes results.json, report.md and dnsperf's raw output to
--out. Needs dnsperf and a CoreDNS binary.

flags:
`)
		fs.PrintDefaults()
	}
	services := fs.Int("services", 1000, "services in the zone")
	reps := fs.Int("reps", 3, "interleaved repetitions")
	duration := fs.Duration("duration", 10*time.Second, "each throughput run")
	latencyDuration := fs.Duration("latency-duration", 5*time.Second, "each latency run")
	latencyQPS := fs.Int("latency-qps", 0, "the latency runs' rate (default half the slower server's throughput)")
	clients := fs.Int("clients", 4, "dnsperf -c: clients")
	outstanding := fs.Int("outstanding", 100, "dnsperf -q: queries in flight")
	coredns := fs.String("coredns", "", "CoreDNS binary (default $SNORKEL_COREDNS, else "+defaultCoreDNS+")")
	dnsperfBin := fs.String("dnsperf", "dnsperf", "dnsperf binary")
	out := fs.String("out", "", "output directory (default perf/out/dns-<UTC timestamp>)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q: snorkel benchmark dns takes flags only", fs.Arg(0))
	}
	if *coredns == "" {
		*coredns = os.Getenv("SNORKEL_COREDNS")
	}
	if *coredns == "" {
		*coredns = defaultCoreDNS
	}
	if _, err := os.Stat(*coredns); err != nil {
		return fmt.Errorf("--coredns %s: %w; build it with `make tools`, or name a CoreDNS binary", *coredns, err)
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	dir := *out
	if dir == "" {
		dir = filepath.Join("perf", "out", "dns-"+time.Now().UTC().Format("20060102T150405Z"))
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	rep, err := dnsperf.Run(ctx, dnsperf.Options{
		Services: *services, Reps: *reps, Duration: *duration, LatencyDuration: *latencyDuration,
		LatencyQPS: *latencyQPS, Clients: *clients, Outstanding: *outstanding,
		Snorkel: self, CoreDNS: *coredns, Dnsperf: *dnsperfBin, Dir: dir, Progress: os.Stderr,
	})
	if err != nil {
		return err
	}
	fmt.Print(rep.Markdown())
	fmt.Printf("\nresults in %s\n", dir)
	return nil
}
