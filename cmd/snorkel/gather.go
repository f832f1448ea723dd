package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/snorkel-net/snorkel/controller/api"
	"github.com/snorkel-net/snorkel/controller/gather"
	"github.com/snorkel-net/snorkel/controller/show"
)

const gatherUsage = "logs, objects, gateway /status, /flows and metrics for a problem report, secrets redacted: " +
	"snorkel gather [--dir DIR] [--tar] [--module connectivity,service-discovery,broker,operator] [--type logs,resources,status] " +
	"[--include-sensitive-data] [--kubeconfig F] [--context C | --contexts C1,C2]"

// gatherTimeout bounds a whole `snorkel gather`.
const gatherTimeout = 15 * time.Minute

// runGather is `snorkel gather`: subctl's flags, subctl's directory.
func runGather(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("gather", flag.ContinueOnError)
	o := gather.Options{Status: out}
	fs.StringVar(&o.Directory, "dir", "", `the directory to store the files in, one directory per cluster (default "submariner-YYYYMMDDHHMMSS" in the current directory, as subctl names it)`)
	modules := fs.String("module", strings.Join(gather.Modules, ","), "comma-separated components to gather from")
	types := fs.String("type", strings.Join(gather.Types, ","), "comma-separated types of data to gather (status: the gateways' /status and /flows, and metrics)")
	fs.BoolVar(&o.IncludeSensitiveData, "include-sensitive-data", false, "keep Secrets' values and the broker token in the files")
	tarball := fs.Bool("tar", false, "write DIR.tar.gz and remove DIR")
	var sel show.Selection
	fs.StringVar(&sel.Kubeconfig, "kubeconfig", "", "kubeconfig file, or several separated by ':' (default $KUBECONFIG or ~/.kube/config)")
	fs.StringVar(&sel.Context, "context", "", "gather from this kubeconfig context (default the current context)")
	contexts := fs.String("contexts", "", "gather from these kubeconfig contexts, comma-separated")
	fs.StringVar(&o.Namespace, "namespace", api.AgentNamespace, "the agent namespace")
	if err := parseFlags(fs, args, nil, out); err != nil {
		return err
	}
	o.Modules, o.Types, sel.Contexts = splitList(*modules), splitList(*types), splitList(*contexts)
	if err := o.Check(); err != nil {
		return fmt.Errorf("invalid argument: %w", err)
	}
	if o.Directory == "" {
		o.Directory = "submariner-" + time.Now().UTC().Format("20060102150405")
	}
	if sel.Context == "" && len(sel.Contexts) == 0 {
		current, err := currentContext(sel.Kubeconfig)
		if err != nil {
			return err
		}
		sel.Context = current
	}
	targets, _, err := sel.Targets(out)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), gatherTimeout)
	defer cancel()
	err = gather.Run(ctx, targets, o)
	if !*tarball {
		return err
	}
	path := filepath.Clean(o.Directory) + ".tar.gz"
	if terr := gather.Tarball(o.Directory, path); terr != nil {
		return errors.Join(err, terr)
	}
	if rerr := os.RemoveAll(o.Directory); rerr != nil {
		return errors.Join(err, rerr)
	}
	fmt.Fprintf(out, "Files are stored in %q\n", path)
	return err
}

// currentContext is the kubeconfig's current context, which subctl's
// gather uses when no context is named.
func currentContext(kubeconfig string) (string, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if kubeconfig != "" {
		rules.Precedence = strings.FieldsFunc(kubeconfig, func(r rune) bool { return r == filepath.ListSeparator || r == ',' })
	}
	raw, err := rules.Load()
	if err != nil {
		return "", err
	}
	if raw.CurrentContext == "" {
		return "", errors.New("the kubeconfig has no current context; give --context or --contexts")
	}
	return raw.CurrentContext, nil
}
