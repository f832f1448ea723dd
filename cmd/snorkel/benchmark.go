package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/snorkel-net/snorkel/perf"
	"github.com/snorkel-net/snorkel/perf/kube"
	"github.com/snorkel-net/snorkel/transport"
)

const benchmarkUsage = `usage: snorkel benchmark throughput|latency|all [flags]
       snorkel benchmark throughput|latency --kubecontexts C1,C2 [--kubeconfig FILE] [flags]
       snorkel benchmark report DIR

Measures the data path between a pod of one cluster and a pod of another.

throughput: iperf3 TCP with 1 and 10 parallel flows, each way, and the
            highest rate of 64-byte UDP datagrams forwarded with at most
            0.1% lost, searched by paced trials (RFC 2544; --udp-rate caps it).
latency:    TCP request/response round trips (p50, p99, p99.9) and ping.
all:        both.

On this host (root): the lab's two clusters in network namespaces, through
Snorkel's gateways over each --transport (and with --globalnet, each again
between clusters with the same CIDRs joined by Globalnet), and through the
baselines set up the same way: veth (no tunnel, the ceiling), kernel-vxlan,
wireguard-go and strongswan (charon with kernel-libipsec). Every system is up
at once and measured in interleaved repetitions; the CPU seconds per gigabit
and peak memory of the tunnel processes are recorded too. A baseline that
cannot run here is reported unavailable, with the reason. Progress goes to
stderr, the tables to stdout; --out receives results.json, report.md, SVG
plots, each tool's raw output, with --cpu-profile the gateways' CPU
profiles, and with --perf-stat the counters of perf stat.

With --kubecontexts, on two real clusters instead: an iperf3 (or netserver)
server pod in the second context's cluster, client pods in the first's aimed
at its pod IP or, with --globalnet, at the global IP of an exported service
in front of it; their output is read from the pods' logs, and everything is
deleted at the end.

report DIR writes DIR's report.md and plots again from its results.json.

Needs iperf3 and ping; wg and a wireguard-go binary ($WG_GO, or
.cache/bin/wireguard-go as ` + "`make tools`" + ` builds it) for wireguard-go;
strongSwan's charon, swanctl and kernel-libipsec for strongswan.

flags:
`

// runBenchmark is `snorkel benchmark`.
func runBenchmark(args []string) error {
	sub := perf.BenchmarkThroughput
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		sub, args = args[0], args[1:]
	}
	switch sub {
	case "report":
		return benchmarkReport(args)
	case "dns":
		return runBenchmarkDNS(args)
	}
	fs := flag.NewFlagSet("benchmark", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), benchmarkUsage)
		fs.PrintDefaults()
	}
	transports := fs.String("transport", "all", "Snorkel transports to measure, comma-separated: "+strings.Join(transport.Kinds, ", ")+", all, or none")
	globalnet := fs.Bool("globalnet", false, "also measure each Snorkel transport with Globalnet translation in both gateways; with --kubecontexts, reach the server through an exported service's global IP")
	baselines := fs.String("baseline", "all", "baselines to measure, comma-separated: "+strings.Join(perf.BaselineNames, ", ")+", all, or none")
	reps := fs.Int("reps", 3, "repetitions of each workload on each system")
	duration := fs.Duration("duration", 10*time.Second, "traffic time of each measurement (whole seconds)")
	udpRate := fs.Float64("udp-rate", 0, "highest rate, in datagrams per second, the UDP search tries; 0 takes it from an unpaced probe")
	out := fs.String("out", "", "output directory (default perf/out/<UTC timestamp>)")
	stateDir := fs.String("state-dir", perf.DefaultBenchStateDir, "where each system's lab state lives")
	prefix := fs.String("prefix", perf.DefaultBenchPrefix, "prefix of every namespace name")
	idleWait := fs.Duration("idle-wait", 60*time.Second, "longest wait before each measurement for the host to go idle (negative: do not wait)")
	idleBusy := fs.Float64("idle-busy", 25, "host CPU busy percentage that counts as idle")
	profile := fs.Bool("cpu-profile", false, "record a CPU profile of each Snorkel gateway during every single-flow TCP repetition and every UDP search (into --out/profiles)")
	perfStat := fs.Bool("perf-stat", false, "count with perf stat (context switches, page faults, task-clock; cycles and instructions where the CPU offers them) on each system's tunnel processes, or the whole host for a kernel data path, during every single-flow TCP repetition (into --out/perfstat)")
	kubecontexts := fs.String("kubecontexts", "", "CLIENT,SERVER: measure between pods of two real clusters, by these kubeconfig contexts")
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig file(s), separated as in $KUBECONFIG (default: $KUBECONFIG, then ~/.kube/config)")
	image := fs.String("image", kube.DefaultImage, "image of the server and client pods, with iperf3 and netperf (--kubecontexts)")
	podTimeout := fs.Duration("pod-timeout", kube.DefaultPodTimeout, "how long a pod may take to start, and a client pod beyond the traffic time to finish (--kubecontexts)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q; see snorkel benchmark -h", fs.Arg(0))
	}
	if !slices.Contains(perf.Benchmarks, sub) {
		return fmt.Errorf("unknown benchmark %q; use throughput, latency, all, dns or report", sub)
	}
	command := "snorkel benchmark " + strings.Join(append([]string{sub}, args...), " ")
	outDir := *out
	if outDir == "" {
		outDir = filepath.Join("perf", "out", time.Now().UTC().Format("20060102T150405Z"))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	var res *perf.Results
	var err error
	if *kubecontexts != "" {
		contexts := strings.Split(*kubecontexts, ",")
		if len(contexts) != 2 || contexts[0] == "" || contexts[1] == "" {
			return fmt.Errorf("--kubecontexts %q: give two contexts, CLIENT,SERVER", *kubecontexts)
		}
		res, err = kube.Run(ctx, kube.Options{
			Kubeconfig: *kubeconfig,
			Contexts:   [2]string{contexts[0], contexts[1]},
			Benchmark:  sub,
			Globalnet:  *globalnet,
			Reps:       *reps,
			Duration:   *duration,
			Image:      *image,
			PodTimeout: *podTimeout,
			OutDir:     outDir,
			Command:    command,
			Progress:   os.Stderr,
		})
	} else {
		if os.Geteuid() != 0 {
			return errors.New("needs root, to create network namespaces and TUN devices; run it with sudo, or measure real clusters with --kubecontexts")
		}
		res, err = perf.Run(ctx, perf.Options{
			Benchmark:   sub,
			Transports:  list(*transports, transport.Kinds),
			Globalnet:   *globalnet,
			Baselines:   list(*baselines, perf.BaselineNames),
			Reps:        *reps,
			Duration:    *duration,
			UDPRate:     *udpRate,
			OutDir:      outDir,
			StateDir:    *stateDir,
			Prefix:      *prefix,
			IdleWait:    *idleWait,
			IdleBusyMax: *idleBusy,
			CPUProfile:  *profile,
			PerfStat:    *perfStat,
			Command:     command,
			Progress:    os.Stderr,
		})
	}
	if res != nil {
		if perr := printResults(os.Stdout, res, outDir); perr != nil {
			return perr
		}
	}
	return err
}

// benchmarkReport is `snorkel benchmark report DIR`.
func benchmarkReport(args []string) error {
	if len(args) != 1 || strings.HasPrefix(args[0], "-") {
		return errors.New("usage: snorkel benchmark report DIR (a directory holding a run's results.json)")
	}
	dir := args[0]
	res, err := perf.ReadResults(filepath.Join(dir, "results.json"))
	if err != nil {
		return err
	}
	if err := res.Finish(dir); err != nil {
		return err
	}
	return printResults(os.Stdout, res, dir)
}

// printResults prints the tables and where the files are.
func printResults(w io.Writer, res *perf.Results, dir string) error {
	fmt.Fprintln(w)
	if err := res.WriteTable(w); err != nil {
		return err
	}
	abs, _ := filepath.Abs(dir)
	fmt.Fprintf(w, "\nresults: %s\n", filepath.Join(abs, "results.json"))
	fmt.Fprintf(w, "report:  %s\n", filepath.Join(abs, "report.md"))
	for _, p := range res.Plots {
		fmt.Fprintf(w, "plot:    %s\n", filepath.Join(abs, p))
	}
	return nil
}

// list splits a comma-separated flag value; "all" stands for every value
// and "none" for no value.
func list(v string, all []string) []string {
	switch v {
	case "all":
		return slices.Clone(all)
	case "none", "":
		return nil
	}
	return strings.Split(v, ",")
}
