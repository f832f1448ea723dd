package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/snorkel-net/snorkel/controller/api"
	"github.com/snorkel-net/snorkel/controller/show"
)

// showKubeTimeout bounds a whole `snorkel show VIEW` run.
const showKubeTimeout = 5 * time.Minute

// isKubeView reports whether what is one of the views read from clusters.
func isKubeView(what string) bool {
	_, err := show.ParseView(what)
	return err == nil
}

// runShowKube is `snorkel show VIEW` for the views read from the clusters
// of a kubeconfig.
func runShowKube(what string, args []string) error {
	return showKube(what, args, os.Stdout, os.Stderr)
}

func showKube(what string, args []string, out, status io.Writer) error {
	view, err := show.ParseView(what)
	if err != nil {
		return err
	}
	fs := flag.NewFlagSet("show "+what, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var sel show.Selection
	fs.StringVar(&sel.Kubeconfig, "kubeconfig", "", "kubeconfig file, or several separated by ':' (default $KUBECONFIG or ~/.kube/config)")
	fs.StringVar(&sel.Context, "context", "", "show this kubeconfig context only")
	contexts := fs.String("contexts", "", "show these kubeconfig contexts, comma-separated (default every context, one per cluster)")
	o := show.Options{Out: out, Status: status}
	fs.StringVar(&o.Namespace, "namespace", api.AgentNamespace, "the agent namespace")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintf(status, "usage: snorkel show %s [--kubeconfig F] [--context C | --contexts C1,C2] [--namespace NS]\n\nflags:\n", what)
			fs.SetOutput(status)
			fs.PrintDefaults()
		}
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q; see snorkel show %s -h", fs.Arg(0), what)
	}
	for _, c := range strings.Split(*contexts, ",") {
		if c = strings.TrimSpace(c); c != "" {
			sel.Contexts = append(sel.Contexts, c)
		}
	}
	targets, header, err := sel.Targets(status)
	if err != nil {
		return err
	}
	o.Header = header
	ctx, cancel := context.WithTimeout(context.Background(), showKubeTimeout)
	defer cancel()
	return show.Run(ctx, view, targets, o)
}
