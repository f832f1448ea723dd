package main

import (
	"flag"
	"fmt"
	"io"
	"strconv"

	"github.com/snorkel-net/snorkel/controller/servicesync"
)

// One-line usages of the commands, for the snorkel command list.
const (
	exportUsage   = "export a service to the clusterset: snorkel export service NAME [-n NAMESPACE] [--use-clusterset-ip[=false]] [--kubeconfig F] [--context C]"
	unexportUsage = "stop exporting a service: snorkel unexport service NAME [-n NAMESPACE] [--kubeconfig F] [--context C]"
)

// runExport is `snorkel export service NAME`.
func runExport(args []string, out io.Writer) error {
	c, err := parseServiceArgs("export", args, out)
	if err != nil {
		return err
	}
	return servicesync.RunExport(c, out)
}

// runUnexport is `snorkel unexport service NAME`.
func runUnexport(args []string, out io.Writer) error {
	c, err := parseServiceArgs("unexport", args, out)
	if err != nil {
		return err
	}
	return servicesync.RunUnexport(c, out)
}

// parseServiceArgs reads "service NAME" and the flags, in any order.
func parseServiceArgs(verb string, args []string, out io.Writer) (servicesync.ServiceCommand, error) {
	var c servicesync.ServiceCommand
	fs := flag.NewFlagSet(verb, flag.ContinueOnError)
	fs.SetOutput(out)
	fs.Usage = func() {
		fmt.Fprintf(out, "usage: snorkel %s service NAME [flags]\n\nflags:\n", verb)
		fs.PrintDefaults()
	}
	fs.StringVar(&c.Namespace, "n", "", "the service's namespace (default: the context's namespace, else default)")
	fs.StringVar(&c.Namespace, "namespace", "", "same as -n")
	fs.StringVar(&c.Kubeconfig, "kubeconfig", "", "kubeconfig file (default $KUBECONFIG or ~/.kube/config)")
	fs.StringVar(&c.Context, "context", "", "kubeconfig context of the cluster the service is in (default: the current context)")
	if verb == "export" {
		fs.Var(&optionalBool{dst: &c.UseClustersetIP}, "use-clusterset-ip", "give the service a clusterset IP (a VIP), or not with =false (default the cluster's setting)")
	}
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return c, err
		}
		if fs.NArg() == 0 {
			break
		}
		pos, args = append(pos, fs.Arg(0)), fs.Args()[1:]
	}
	switch {
	case len(pos) == 0 || pos[0] != "service":
		fs.Usage()
		return c, fmt.Errorf("name what to %s: snorkel %s service NAME", verb, verb)
	case len(pos) != 2:
		return c, fmt.Errorf("give one service name after %q, got %d: snorkel %s service NAME -n NAMESPACE", "service", len(pos)-1, verb)
	}
	c.Name = pos[1]
	return c, nil
}

// optionalBool is a boolean flag that records whether it was given: dst
// stays "" without it, else "true" or "false".
type optionalBool struct{ dst *string }

func (b *optionalBool) String() string {
	if b.dst == nil {
		return ""
	}
	return *b.dst
}

func (b *optionalBool) Set(v string) error {
	p, err := strconv.ParseBool(v)
	if err != nil {
		return fmt.Errorf("%q is not true or false", v)
	}
	*b.dst = strconv.FormatBool(p)
	return nil
}

func (b *optionalBool) IsBoolFlag() bool { return true }
