package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"k8s.io/client-go/rest"

	"github.com/snorkel-net/snorkel/controller/api"
	"github.com/snorkel-net/snorkel/controller/diagnose"
	"github.com/snorkel-net/snorkel/controller/show"
)

const diagnoseUsage = "what is misconfigured in a cluster, and how to fix it: snorkel diagnose all|cni|connections|deployment|firewall [intra-cluster|metrics|inter-cluster|nat-discovery]|k8s-version|kube-proxy-mode|service-discovery|globalnet " +
	"[--kubeconfig F] [--context C [--remotecontext C2] | --contexts C1,C2 | --in-cluster] [--namespace NS] [--validation-timeout 90] [--image REF] [--no-probes] [--verbose]"

// runDiagnose is `snorkel diagnose`.
func runDiagnose(args []string, out io.Writer) error {
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		fmt.Fprintf(out, "usage: %s\n", diagnoseUsage)
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help") {
			return flag.ErrHelp
		}
		return fmt.Errorf("name a check: %s", diagnose.CheckNames())
	}
	check, err := diagnose.ParseCheck(args[0])
	if err != nil {
		return err
	}
	args = args[1:]
	mode := ""
	if check == diagnose.Firewall && len(args) > 0 && slices.Contains(diagnose.FirewallParts, args[0]) {
		mode, args = args[0], args[1:]
	}
	fs := flag.NewFlagSet("diagnose "+string(check), flag.ContinueOnError)
	var sel show.Selection
	fs.StringVar(&sel.Kubeconfig, "kubeconfig", "", "kubeconfig file, or several separated by ':' (default $KUBECONFIG or ~/.kube/config)")
	fs.StringVar(&sel.Context, "context", "", "diagnose this kubeconfig context only")
	contexts := fs.String("contexts", "", "diagnose these kubeconfig contexts, comma-separated (default every context, one per cluster)")
	remote := fs.String("remotecontext", "", "firewall inter-cluster and nat-discovery: the remote cluster's context, diagnosed after --context")
	inCluster := fs.Bool("in-cluster", false, "diagnose the cluster this runs in, with its pod's ServiceAccount")
	o := diagnose.Options{Out: out, Firewall: mode}
	fs.StringVar(&o.Image, "image", "", "the image the probe pods run (default the agent DaemonSet's, which the nodes have)")
	noProbes := fs.Bool("no-probes", false, "start no probe pods: the firewall check reads what the gateways reported, and MTU, MSS and masquerade are not probed")
	fs.StringVar(&o.Namespace, "namespace", api.AgentNamespace, "the agent namespace")
	timeout := fs.Uint("validation-timeout", 90, "seconds each batch of probe pods may take, and each cluster's checks besides the probes")
	fs.BoolVar(&o.Verbose, "verbose", false, "print a ✓ line for every object checked, not only the summaries")
	if err := parseFlags(fs, args, nil, out); err != nil {
		return err
	}
	if *timeout == 0 {
		return fmt.Errorf("--validation-timeout must be at least 1 second")
	}
	sel.Contexts = splitList(*contexts)
	if *remote != "" {
		if sel.Context == "" {
			return fmt.Errorf("--remotecontext needs --context, the local cluster's")
		}
		sel.Contexts, sel.Context = []string{sel.Context, *remote}, ""
	}
	var targets []show.Target
	if *inCluster {
		if sel.Context != "" || len(sel.Contexts) > 0 || sel.Kubeconfig != "" {
			return fmt.Errorf("give --in-cluster or --kubeconfig/--context/--contexts, not both")
		}
		cfg, err := rest.InClusterConfig()
		if err != nil {
			return fmt.Errorf("--in-cluster: %w", err)
		}
		targets = []show.Target{{Context: "in-cluster", Cluster: "in-cluster", Config: cfg}}
	} else if targets, o.Header, err = sel.Targets(out); err != nil {
		return err
	}
	perCluster := time.Duration(*timeout) * time.Second
	o.RequestTimeout = min(perCluster, 15*time.Second)
	o.Probe, o.ProbeTimeout = !*noProbes, perCluster
	// Each cluster runs up to five batches of probe pods (intra-cluster
	// with metrics, inter-cluster with NAT discovery, path, masquerade,
	// and the server they share).
	budget := perCluster * time.Duration(len(targets))
	if o.Probe {
		budget *= 6
	}
	// An interrupt ends the checks; the probe pods' namespaces are
	// deleted all the same.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, budget)
	defer cancel()
	return diagnose.Run(ctx, check, targets, o)
}
