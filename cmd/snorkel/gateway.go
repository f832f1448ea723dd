package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"strings"
	"syscall"

	"github.com/snorkel-net/snorkel/controller"
	"github.com/snorkel-net/snorkel/gateway"
	"github.com/snorkel-net/snorkel/transport/wireguard"
)

func runGateway(args []string) error {
	fs := flag.NewFlagSet("gateway", flag.ContinueOnError)
	cfgPath := fs.String("config", "", "gateway configuration file (YAML)")
	check := fs.Bool("check", false, "validate the configuration and exit")
	debug := addDebugFlags(fs)
	uninstall := fs.Bool("uninstall", false, "remove the guard routes that keep the remote clusters' traffic from leaving in cleartext while no gateway runs, and exit; needs no --config. Run it only when Snorkel leaves the node")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *uninstall {
		return uninstallGateway()
	}
	if *cfgPath == "" {
		return errors.New("--config is required: name the gateway's YAML configuration file")
	}
	cfg, err := controller.LoadGatewayConfig(*cfgPath)
	if err != nil {
		return err
	}
	if *check {
		if err := cfg.Check(); err != nil {
			return fmt.Errorf("config %s: %w", *cfgPath, err)
		}
		fmt.Println("config ok")
		return nil
	}
	spec, err := cfg.Compile()
	if err != nil {
		return fmt.Errorf("config %s: %w", *cfgPath, err)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil)).With("cluster", cfg.Cluster.ID)
	tuneRuntime()
	r := gateway.NewRunner(log)
	// Serve metrics and state before the routes exist: whoever waits for
	// the routes as the sign that the gateway is up can then query it at
	// once.
	if cfg.MetricsAddress != "" {
		srv, err := listenHTTP("metricsAddress", cfg.MetricsAddress, r.MetricsHandler(), metricsLimits)
		if err != nil {
			return err
		}
		defer srv.Close()
	}
	dbg, err := debug.serve(r.DebugHandler())
	if err != nil {
		return err
	}
	if dbg != nil {
		defer dbg.Close()
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	// Close undoes the routes before the device goes, so that nothing this
	// process added outlives it but the guard, which drops the remotes'
	// traffic until a gateway runs again or --uninstall.
	defer r.Close()
	if err := r.Apply(ctx, spec); err != nil {
		return err
	}
	log.Info("gateway running", "metrics", cfg.MetricsAddress, "debug", *debug.address)
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	for {
		select {
		case <-ctx.Done():
			log.Info("gateway down")
			return nil
		case err := <-r.Failed():
			return err
		case <-hup:
			reloadGateway(ctx, r, *cfgPath, log)
		}
	}
}

// reloadGateway reads the configuration file again and applies it: a
// change to the remotes or Globalnet's addresses in place, any other by a
// restart. A file that does not load keeps the gateway as it is.
func reloadGateway(ctx context.Context, r *gateway.Runner, path string, log *slog.Logger) {
	cfg, err := controller.LoadGatewayConfig(path)
	if err == nil {
		var s *gateway.Spec
		if s, err = cfg.Compile(); err == nil {
			err = r.Apply(ctx, s)
		}
	}
	if err != nil {
		log.Error("reload refused; the gateway keeps its configuration", "config", path, "err", err)
		return
	}
	log.Info("configuration reloaded", "config", path)
}

// uninstallGateway is the gateway's part of taking Snorkel off a node: the
// gateway's own state dies with it, the guard does not.
func uninstallGateway() error {
	removed, err := gateway.RemoveGuard()
	for _, p := range removed {
		fmt.Printf("removed the guard of %s\n", p)
	}
	if err != nil {
		return err
	}
	if len(removed) == 0 {
		fmt.Println("no guard routes on this node")
	}
	return nil
}

func runGenkey(args []string) error {
	k, err := wireguard.GenerateKey()
	if err != nil {
		return err
	}
	fmt.Println(k.String())
	return nil
}

func runPubkey(args []string) error {
	b, err := io.ReadAll(io.LimitReader(os.Stdin, 1024))
	if err != nil {
		return err
	}
	k, err := wireguard.ParseKey(strings.TrimSpace(string(b)))
	if err != nil {
		return fmt.Errorf("stdin: %w", err)
	}
	fmt.Println(k.Public().String())
	return nil
}

// dataPlaneGCPercent is the garbage collector's target in a process that
// runs a gateway. Under load its heap is mostly long-lived packet buffers
// (about 30 MiB: the TUN batch, the UDP receive batches, the TUN's GRO
// tables), and the little garbage a packet leaves would, at Go's default of
// 100, let the heap grow to twice that before a collection: peak memory
// fell from 70 to 48 MiB per VXLAN gateway with no loss of throughput
// (README, Performance).
const dataPlaneGCPercent = 25

// tuneRuntime sets the garbage collector's target for a gateway process,
// unless the GOGC environment variable sets one, and the number of CPUs
// that run its Go code at once, unless GOMAXPROCS does.
func tuneRuntime() {
	if _, ok := os.LookupEnv("GOGC"); !ok {
		debug.SetGCPercent(dataPlaneGCPercent)
	}
	if _, ok := os.LookupEnv("GOMAXPROCS"); !ok {
		runtime.GOMAXPROCS(dataPlaneProcs(runtime.GOMAXPROCS(0)))
	}
}

// dataPlaneProcs is how many CPUs a gateway process runs Go code on at
// once where Go by itself would use n: one fewer, and at least one. Most of
// a packet's cost is the kernel's, on the gateway's threads: its system
// calls copy each byte and run the next hop's network stack before they
// return. A Go process that may run on every CPU wakes a spare thread
// whenever one of its data-path goroutines wakes while another runs, and
// that thread spins for work on the CPU the rest of the node's traffic
// needs. On 2 CPUs, one for Go cut the CPU per gigabit of WireGuard
// gateways by 13–26% and of ESP gateways by 5–12%, and left VXLAN's within
// the spread (README, Performance).
func dataPlaneProcs(n int) int {
	return max(1, n-1)
}
