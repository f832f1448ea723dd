package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/snorkel-net/snorkel/perf/lab"
)

const labUsage = `usage: snorkel lab [run|up|down|status] [flags]

Builds the Snorkel lab on this host (root): clusters c1 and c2 as network
namespaces, a snorkel gateway per cluster, pods, and c2's service web at
10.99.0.10:80 with three backends.

  run     bring it up, check traffic across clusters, tear down (default);
          exits non-zero if a check fails
  up      bring it up and leave it running
  down    tear down a lab left running by up
  status  show namespaces, processes, routes and gateway counters

flags:
`

// runLab is `snorkel lab`.
func runLab(args []string) error {
	sub := "run"
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		sub, args = args[0], args[1:]
	}
	fs := flag.NewFlagSet("lab", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), labUsage)
		fs.PrintDefaults()
	}
	transport := fs.String("transport", "wireguard", "tunnel between the gateways: "+strings.Join(lab.Transports, ", ")+" (kernel: plain routes, no gateway)")
	var scenarios []string
	for _, n := range lab.ScenarioNames() {
		sc, _ := lab.ScenarioByName(n)
		scenarios = append(scenarios, n+" ("+sc.Description+")")
	}
	scenario := fs.String("scenario", "basic", "what to build: "+strings.Join(scenarios, "; "))
	stateDir := fs.String("state-dir", lab.DefaultStateDir, "where configs, keys, logs and the teardown record live")
	prefix := fs.String("prefix", lab.DefaultPrefix, "prefix of every namespace name, to run labs side by side")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q; see snorkel lab -h", fs.Arg(0))
	}
	if os.Geteuid() != 0 {
		return errors.New("needs root, to create network namespaces and TUN devices; run it with sudo")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	switch sub {
	case "down":
		return lab.Down(*stateDir, os.Stdout)
	case "status":
		return lab.Status(ctx, *stateDir, os.Stdout)
	case "run", "up":
	default:
		return fmt.Errorf("unknown command %q; use run, up, down or status", sub)
	}
	sc, err := lab.ScenarioByName(*scenario)
	if err != nil {
		return err
	}
	o := lab.Options{Scenario: sc, Transport: *transport, StateDir: *stateDir, Prefix: *prefix}
	if sub == "up" {
		return lab.UpAndDescribe(ctx, o, os.Stdout)
	}
	return lab.Run(ctx, o, os.Stdout)
}
