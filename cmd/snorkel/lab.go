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

	"github.com/snorkel-net/snorkel/lab"
	"github.com/snorkel-net/snorkel/lab/nodes"
)

const labUsage = `usage: snorkel lab [run|up|down|status] [flags]
       snorkel lab failover --nodes [--scenario S] [--transport T] [--rounds 10] [--kinds K,...] [--streams 20]

Builds the Snorkel lab on this host (root): two clusters as network
namespaces, a snorkel gateway per cluster, pods and services. Scenario basic
has c1 and c2 with distinct CIDRs and c2's service web at 10.99.0.10:80;
scenario globalnet has g1 and g2 with the same CIDRs, joined by Globalnet.

  run     bring it up, check traffic across clusters, tear down (default);
          without --scenario every scenario runs in turn; exits non-zero if
          a check fails
  up      bring it up and leave it running (default scenario basic)
  down    tear down a lab left running by up
  status  show namespaces, processes, routes and gateway counters

With --kube the gateways are configured by the control plane, as on
Kubernetes: an API server for a broker and for each cluster, the lab's pods
and services written to them, snorkel agent on each gateway node, and every
service exported with snorkel export.

With --nodes it is the real-node lab: Kubernetes clusters whose nodes are
kubelets (with containerd and kube-proxy, each node a network namespace),
Snorkel installed by deploy-broker and join from its image, and the
Submariner tutorial typed and checked, ending with a failover of each kind.
Scenario tutorial has c1 and c2, scenario globalnet g1 and g2 with the same
CIDRs; run runs both. Each cluster has two gateway nodes and a worker.
failover measures gateway failovers: streams and a ping run from the first
cluster's worker to the second's while the clusters' active gateways fail
in turn (pod-delete, node-kill, link-cut; daemons-kill, which must not fail
over), and it prints each failover and the percentiles of the recovery
times. This binary
becomes Snorkel's image, so it must be static: make node-lab builds it so.

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
	scenario := fs.String("scenario", "", "what to build: "+strings.Join(scenarios, "; ")+"; default: run runs "+strings.Join(lab.RunOrder, " then ")+", up builds basic")
	stateDir := fs.String("state-dir", lab.DefaultStateDir, "where configs, keys, logs and the teardown record live")
	prefix := fs.String("prefix", lab.DefaultPrefix, "prefix of every namespace name, to run labs side by side")
	nodeLab := fs.Bool("nodes", false, "the real-node lab: Kubernetes clusters whose nodes are kubelets with containerd and kube-proxy in network namespaces; Snorkel installed with deploy-broker and join, and the tutorial checked (scenarios tutorial and globalnet)")
	var nf nodeLabFlags
	fs.StringVar(&nf.toolsDir, "kube-tools", os.Getenv(envKubeTools), "with --nodes: the directory of kubelet, kube-proxy, kube-controller-manager, kube-scheduler and kubectl, as make tools builds them")
	fs.StringVar(&nf.kubeVersion, "kube-version", envOr(envKubeVersion, "v1.37.2"), "with --nodes: the version in those programs' names")
	fs.StringVar(&nf.coreDNS, "coredns", os.Getenv(envCoreDNS), "with --nodes: a static CoreDNS binary, for the clusters' DNS image")
	fs.IntVar(&nf.rounds, "rounds", 10, "with failover: how many failovers of each kind")
	fs.StringVar(&nf.kinds, "kinds", "pod-delete,node-kill,link-cut,daemons-kill", "with failover: the kinds of failure, in the order each round runs them (daemons-kill kills kubelet, containerd and kube-proxy alone, and requires no failover)")
	fs.BoolVar(&nf.keep, "keep", false, "with failover: leave the lab up afterwards")
	fs.IntVar(&nf.streams, "streams", 20, "with failover: how many long-lived TCP streams run through the failovers")
	fs.StringVar(&nf.pause, "pause", os.Getenv(envPause), "with --nodes: a static pause program (deploy/imagetar/pause), for the pods' sandbox image")
	kube := fs.Bool("kube", false, "run the control plane: a broker and an API server per cluster (etcd and kube-apiserver, as `make tools` builds it), snorkel agent on each gateway node, services exported with snorkel export")
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

	if *nodeLab {
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		if !set["state-dir"] {
			*stateDir = nodes.DefaultStateDir
		}
		if !set["prefix"] {
			*prefix = nodes.DefaultPrefix
		}
		cable := ""
		if set["transport"] {
			cable = *transport
		}
		return runNodeLab(ctx, sub, *scenario, *stateDir, *prefix, cable, nf)
	}
	switch sub {
	case "down":
		return lab.Down(*stateDir, os.Stdout)
	case "status":
		return lab.Status(ctx, *stateDir, os.Stdout)
	case "run", "up":
	default:
		return fmt.Errorf("unknown command %q; use run, up, down or status", sub)
	}
	o := lab.Options{Transport: *transport, StateDir: *stateDir, Prefix: *prefix, Kube: *kube}
	if sub == "run" && *scenario == "" {
		var all []lab.Scenario
		for _, n := range lab.RunOrder {
			sc, err := lab.ScenarioByName(n)
			if err != nil {
				return err
			}
			all = append(all, sc)
		}
		return lab.RunScenarios(ctx, o, all, os.Stdout)
	}
	if *scenario == "" {
		*scenario = "basic"
	}
	sc, err := lab.ScenarioByName(*scenario)
	if err != nil {
		return err
	}
	o.Scenario = sc
	if sub == "up" {
		return lab.UpAndDescribe(ctx, o, os.Stdout)
	}
	return lab.Run(ctx, o, os.Stdout)
}
