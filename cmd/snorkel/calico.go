package main

import (
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/snorkel-net/snorkel/controller/api"
	"github.com/snorkel-net/snorkel/deploy/calico"
)

// calicoSyntax is how the command is called.
const calicoSyntax = "snorkel calico ippools --cluster ID (--broker-info broker-info.subm | --kubeconfig F --context C [--namespace NS])"

// calicoUsage is the command's line in the snorkel command list.
const calicoUsage = "print the Calico IPPools a cluster needs for the others: " + calicoSyntax

// runCalico is `snorkel calico ippools`: it parses args into a
// calico.IPPoolsCommand and runs it.
func runCalico(args []string, out io.Writer) error {
	if len(args) == 0 || args[0] != "ippools" {
		return fmt.Errorf("usage: %s", calicoSyntax)
	}
	fs := flag.NewFlagSet("calico ippools", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var c calico.IPPoolsCommand
	fs.StringVar(&c.Cluster, "cluster", "", "the cluster the IPPools are for (its --clusterid)")
	fs.StringVar(&c.BrokerInfo, "broker-info", "", "reach the broker with the token of this broker-info.subm")
	fs.StringVar(&c.Kubeconfig, "kubeconfig", "", "kubeconfig file of the broker cluster (instead of --broker-info)")
	fs.StringVar(&c.Context, "context", "", "kubeconfig context of the broker cluster (instead of --broker-info)")
	fs.StringVar(&c.Namespace, "namespace", api.DefaultBrokerNamespace, "broker namespace, with --kubeconfig/--context")
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintf(out, "usage of snorkel calico ippools:\n")
			fs.SetOutput(out)
			fs.PrintDefaults()
		}
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q: snorkel calico ippools takes flags only", fs.Arg(0))
	}
	return calico.RunIPPools(c, out)
}
