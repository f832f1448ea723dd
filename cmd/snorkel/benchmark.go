package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/snorkel-net/snorkel/gateway"
	"github.com/snorkel-net/snorkel/perf"
)

const benchmarkUsage = `usage: snorkel benchmark throughput [flags]

Measures single-flow TCP throughput (iperf3) from a c1 pod to a c2 pod of the
lab, through Snorkel's gateways and through baselines set up the same way, all
up at once, in interleaved repetitions (root). Prints a table and writes
results.json and report.md to --out. With --globalnet, each Snorkel transport
is measured a second time between clusters with the same CIDRs joined by
Globalnet (a g1 pod to a g2 pod's global IP, translated by both gateways) and
compared with itself without Globalnet.

Needs iperf3, wg and, for the wireguard-go baseline, a wireguard-go binary:
$WG_GO, or .cache/bin/wireguard-go as ` + "`make tools`" + ` builds it.

flags:
`

// runBenchmark is `snorkel benchmark`.
func runBenchmark(args []string) error {
	sub := "throughput"
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		sub, args = args[0], args[1:]
	}
	fs := flag.NewFlagSet("benchmark", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), benchmarkUsage)
		fs.PrintDefaults()
	}
	transport := fs.String("transport", "wireguard", "Snorkel transports to measure: "+strings.Join(gateway.Transports, ", ")+", all, or none")
	globalnet := fs.Bool("globalnet", false, "also measure each Snorkel transport with Globalnet translation in both gateways")
	baselines := fs.String("baseline", perf.BaselineWireGuardGo, "baselines to measure, comma-separated: "+strings.Join(perf.BaselineNames, ", ")+", or none")
	reps := fs.Int("reps", 3, "repetitions per system")
	duration := fs.Duration("duration", 10*time.Second, "traffic time per repetition (whole seconds)")
	out := fs.String("out", "", "output directory (default perf/out/<UTC timestamp>)")
	stateDir := fs.String("state-dir", perf.DefaultBenchStateDir, "where each system's lab state lives")
	prefix := fs.String("prefix", perf.DefaultBenchPrefix, "prefix of every namespace name")
	idleWait := fs.Duration("idle-wait", 60*time.Second, "longest wait before each repetition for the host to go idle")
	idleBusy := fs.Float64("idle-busy", 25, "host CPU busy percentage that counts as idle")
	profile := fs.Bool("cpu-profile", false, "record a CPU profile of each Snorkel gateway during every repetition (into --out/profiles)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q; see snorkel benchmark -h", fs.Arg(0))
	}
	if sub != "throughput" {
		return fmt.Errorf("unknown benchmark %q; use throughput", sub)
	}
	o := perf.ThroughputOptions{
		Transports:  list(*transport, gateway.Transports),
		Globalnet:   *globalnet,
		Baselines:   list(*baselines, perf.BaselineNames),
		Reps:        *reps,
		Duration:    *duration,
		OutDir:      *out,
		StateDir:    *stateDir,
		Prefix:      *prefix,
		IdleWait:    *idleWait,
		IdleBusyMax: *idleBusy,
		CPUProfile:  *profile,
		Command:     "snorkel benchmark " + strings.Join(append([]string{sub}, args...), " "),
		Progress:    os.Stdout,
	}
	if o.OutDir == "" {
		o.OutDir = filepath.Join("perf", "out", time.Now().UTC().Format("20060102T150405Z"))
	}
	if os.Geteuid() != 0 {
		return errors.New("needs root, to create network namespaces and TUN devices; run it with sudo")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	res, err := perf.RunThroughput(ctx, o)
	if res != nil {
		fmt.Println()
		if terr := res.WriteTable(os.Stdout); terr != nil {
			return terr
		}
		abs, _ := filepath.Abs(o.OutDir)
		fmt.Printf("\nresults: %s\n", filepath.Join(abs, "results.json"))
		fmt.Printf("report:  %s\n", filepath.Join(abs, "report.md"))
	}
	return err
}

// list splits a comma-separated flag value; "all" stands for every value
// and "none" for no value.
func list(v string, all []string) []string {
	switch v {
	case "all":
		return all
	case "none", "":
		return nil
	}
	return strings.Split(v, ",")
}
