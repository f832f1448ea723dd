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
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/snorkel-net/snorkel/controller/api"
	"github.com/snorkel-net/snorkel/controller/show"
	"github.com/snorkel-net/snorkel/controller/verify"
	"github.com/snorkel-net/snorkel/deploy"
)

const verifyUsage = "check that one cluster reaches another, with pods: snorkel verify [--kubeconfig F] [--context FROM] --tocontext TO " +
	"[--only connectivity,service-discovery] [--image REF] [--namespace-prefix snorkel-verify] [--timeout 3m] " +
	"[--connection-timeout S] [--connection-attempts N] [--packet-size 3000] [--junit-report FILE] [--verbose]"

// runVerify is `snorkel verify`.
func runVerify(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("verify", flag.ContinueOnError)
	var from show.Selection
	var toContext string
	fs.StringVar(&from.Kubeconfig, "kubeconfig", "", "kubeconfig file, or several separated by ':', holding both contexts (default $KUBECONFIG or ~/.kube/config)")
	fs.StringVar(&from.Context, "context", "", "the cluster the checks run from (default the current context)")
	fs.StringVar(&toContext, "tocontext", "", "the cluster the checks reach, where the servers run")
	only := fs.String("only", "connectivity,service-discovery", "the verifications, comma-separated: connectivity (or basic-connectivity), service-discovery")
	o := verify.Options{Out: out}
	fs.StringVar(&o.Image, "image", deploy.ImageName+":"+version, "the Snorkel image the servers and checks run; the default is the image join deploys, which the nodes already have")
	fs.StringVar(&o.NamespacePrefix, "namespace-prefix", "snorkel-verify", "start of the name of the namespace created, then deleted, in both clusters")
	fs.StringVar(&o.Namespace, "namespace", api.AgentNamespace, "the agent namespace, where join stored the agent's configuration")
	fs.StringVar(&o.Namespace, "submariner-namespace", api.AgentNamespace, "subctl's name for --namespace")
	fs.DurationVar(&o.Timeout, "timeout", 3*time.Minute, "how long to wait for the servers, and how long each check retries")
	operationTimeout := fs.Uint("operation-timeout", 0, "subctl's name for --timeout, in seconds")
	connTimeout := fs.Uint("connection-timeout", 0, fmt.Sprintf("seconds each attempt of a check may take (1 to 3600); with it or --connection-attempts a check retries for their product instead of --timeout (subctl's defaults: %d s, %d attempts)", subctlConnTimeout, subctlConnAttempts))
	connAttempts := fs.Uint("connection-attempts", 0, "attempts of each check, each up to --connection-timeout (1 to 100)")
	fs.IntVar(&o.Tries.PacketSize, "packet-size", 3000, fmt.Sprintf("bytes each check by address also fetches from the server, which cross the tunnel in full-size packets (0 for none, at most %d)", maxPacketSize))
	override := fs.String("image-override", "", "subctl's COMPONENT=IMAGE: Snorkel's pods run one image, so only snorkel=IMAGE, the same as --image IMAGE")
	fs.StringVar(&o.JUnitReport, "junit-report", "", "also write the results to this file as a JUnit XML report, for CI")
	fs.BoolVar(&o.Verbose, "verbose", false, "print every check pod's log after the table")
	disruptive := fs.Bool("disruptive-tests", false, "accepted as subctl takes it; changes nothing, as Snorkel runs no disruptive verification (gateway-failover)")
	if err := parseFlags(fs, args, nil, out); err != nil {
		return err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if set["operation-timeout"] && !set["timeout"] {
		o.Timeout = time.Duration(*operationTimeout) * time.Second
	}
	if err := connectionTries(&o.Tries, set, *connTimeout, *connAttempts); err != nil {
		return err
	}
	if set["image-override"] {
		if set["image"] {
			return fmt.Errorf("--image %s and --image-override %s both choose the image: give one of them", o.Image, *override)
		}
		ref, err := imageOverride(*override)
		if err != nil {
			return err
		}
		o.Image = ref
	}
	switch {
	case toContext == "":
		return errors.New("--tocontext is required: the kubeconfig context of the cluster to verify against, e.g. snorkel --context c1 verify --tocontext c2")
	case o.Timeout < 10*time.Second:
		return fmt.Errorf("--timeout %s is too short for pods to start: give at least 10s, e.g. --timeout 3m", o.Timeout)
	case o.Tries.PacketSize < 0 || o.Tries.PacketSize > maxPacketSize:
		return fmt.Errorf("--packet-size %d: give 0 (no transfer) to %d bytes, e.g. subctl's 3000", o.Tries.PacketSize, maxPacketSize)
	}
	if o.JUnitReport != "" {
		if fi, err := os.Stat(filepath.Dir(o.JUnitReport)); err != nil || !fi.IsDir() {
			return fmt.Errorf("--junit-report %s: its directory %s does not exist; create it or give a path in an existing one", o.JUnitReport, filepath.Dir(o.JUnitReport))
		}
	}
	// The namespace is the prefix, a dash and five random characters.
	if errs := validation.IsDNS1123Label(o.NamespacePrefix + "-abcde"); len(errs) > 0 {
		return fmt.Errorf("--namespace-prefix %q makes no namespace name (%s): give lower-case letters, digits and dashes, at most 57, e.g. snorkel-verify",
			o.NamespacePrefix, strings.Join(errs, "; "))
	}
	if *disruptive {
		fmt.Fprintln(out, "--disruptive-tests changes nothing: Snorkel runs no disruptive verification")
	}
	var err error
	if o.Kinds, err = verify.ParseKinds(*only); err != nil {
		return err
	}
	if from.Context == "" {
		if from.Context, err = from.CurrentContext(); err != nil {
			return fmt.Errorf("--context: %w", err)
		}
	}
	// One context in Contexts gives its target, with the reason in Err
	// when the kubeconfig cannot reach it.
	targets, _, err := show.Selection{Kubeconfig: from.Kubeconfig, Contexts: []string{from.Context, toContext}}.Targets(io.Discard)
	if err != nil {
		return err
	}
	for i, flag := range []string{"--context", "--tocontext"} {
		if targets[i].Err != nil {
			return fmt.Errorf("%s: %w", flag, targets[i].Err)
		}
	}
	o.From, o.To = targets[0], targets[1]
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err = verify.Run(ctx, o)
	if errors.Is(err, verify.ErrChecksFailed) {
		return errors.New("some checks failed (✗ above); --verbose prints each check pod's log")
	}
	return err
}

// subctl verify's defaults of the two connection flags, which apply to
// the one not given when the other is.
const (
	subctlConnTimeout  = 60
	subctlConnAttempts = 2
)

// maxPacketSize bounds --packet-size: a transfer larger than one packet
// proves the path; a megabyte is plenty.
const maxPacketSize = 1 << 20

// connectionTries maps subctl's --connection-timeout and
// --connection-attempts onto the check pods' tries: each attempt bounded
// by the timeout, all of them by timeout × attempts. Neither given leaves
// the tries to --timeout.
func connectionTries(t *verify.Tries, set map[string]bool, timeout, attempts uint) error {
	if !set["connection-timeout"] && !set["connection-attempts"] {
		return nil
	}
	if !set["connection-timeout"] {
		timeout = subctlConnTimeout
	}
	if !set["connection-attempts"] {
		attempts = subctlConnAttempts
	}
	switch {
	case timeout < 1 || timeout > 3600:
		return fmt.Errorf("--connection-timeout %d: give 1 to 3600 seconds, e.g. subctl's %d", timeout, subctlConnTimeout)
	case attempts < 1 || attempts > 100:
		return fmt.Errorf("--connection-attempts %d: give 1 to 100, e.g. subctl's %d", attempts, subctlConnAttempts)
	}
	t.Attempt = time.Duration(timeout) * time.Second
	t.Retry = time.Duration(attempts) * t.Attempt
	return nil
}
