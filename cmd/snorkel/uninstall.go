package main

import (
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/snorkel-net/snorkel/controller/api"
	"github.com/snorkel-net/snorkel/controller/broker"
)

const uninstallUsage = "remove Snorkel from a cluster and the cluster from its broker: snorkel uninstall [--kubeconfig F] [--context C] [--yes]"

// uninstallMain is `snorkel uninstall` with the terminal's input and
// output.
func uninstallMain(args []string) error { return runUninstall(args, os.Stdin, os.Stdout) }

// runUninstall parses args into a broker.UninstallCommand and runs it; the
// confirmation prompt reads in.
func runUninstall(args []string, in io.Reader, out io.Writer) error {
	fs := flag.NewFlagSet("uninstall", flag.ContinueOnError)
	var c broker.UninstallCommand
	fs.StringVar(&c.Kubeconfig, "kubeconfig", "", "kubeconfig file of the cluster (default $KUBECONFIG or ~/.kube/config)")
	fs.StringVar(&c.Context, "context", "", "kubeconfig context of the cluster (default the current context)")
	ns := fs.String("namespace", api.AgentNamespace, "the Snorkel namespace; it is always "+api.AgentNamespace+", subctl's default")
	fs.BoolVar(&c.Yes, "yes", false, "uninstall without the confirmation prompt")
	fs.BoolVar(&c.Yes, "y", false, "the same as --yes")
	if err := parseFlags(fs, args, nil, out); err != nil {
		return err
	}
	if *ns != api.AgentNamespace {
		return fmt.Errorf("--namespace %q: Snorkel runs in namespace %q only; leave the flag out", *ns, api.AgentNamespace)
	}
	return broker.RunUninstall(c, in, out)
}
