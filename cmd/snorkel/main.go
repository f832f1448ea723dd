// Command snorkel is the one Snorkel binary: gateway, lab and tools. It only
// parses flags and wires packages together.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
)

type command struct {
	run    func(args []string) error
	usage  string
	hidden bool
}

var commands = map[string]command{
	"gateway": {run: runGateway, usage: "run a gateway: snorkel gateway --config FILE [--debug-address 127.0.0.1:9899] [--pprof] (SIGHUP rereads FILE and applies the change in place); remove its guard routes from the node: snorkel gateway --uninstall"},
	"agent": {run: runAgent, usage: "a gateway node's agent, running the gateway in-process: snorkel agent [--kubeconfig F] [--context C] [--namespace NS] " +
		"[--node-name N] [--private-ip IP] [--public-ip IP] [--natt-discovery-port 4490] [--health-check-ip IP] [--metrics-address :9898] [--debug-address 127.0.0.1:9899] [--pprof] [--dataplane-config-out FILE]"},
	"dnsd": {run: runDNSD, usage: "clusterset.local DNS: snorkel dnsd [--listen :53] [--zone clusterset.local] [--ttl 5s] [--metrics-address ADDR] " +
		"(--static FILE | [--kubeconfig F] [--context C] [--namespace NS] [--cluster-id ID])"},
	"route-agent": {run: runRouteAgent, usage: routeAgentUsage},
	"lab":         {run: runLab, usage: "the two-cluster lab: snorkel lab [run|up|down|status] [--transport wireguard|vxlan]"},
	"show":        {run: runShow, usage: "what Snorkel runs, as subctl shows it: snorkel show connections|endpoints|gateways|networks|brokers|versions|all [--context C]; a gateway's Globalnet flows: snorkel show flows"},
	"genkey":      {run: runGenkey, usage: "print a new WireGuard private key (base64)"},
	"pubkey":      {run: runPubkey, usage: "read a private key on stdin, print its public key"},
	"version":     {run: runVersion, usage: "print the version"},

	"deploy-broker": {run: toStdout(runDeployBroker), usage: deployBrokerUsage},
	"join":          {run: toStdout(runJoin), usage: joinUsage},
	"export":        {run: toStdout(runExport), usage: exportUsage},
	"unexport":      {run: toStdout(runUnexport), usage: unexportUsage},
	"calico":        {run: toStdout(runCalico), usage: calicoUsage},
	"diagnose":      {run: toStdout(runDiagnose), usage: diagnoseUsage},
	"verify":        {run: toStdout(runVerify), usage: verifyUsage},

	"uninstall":           {run: uninstallMain, usage: uninstallUsage},
	"recover-broker-info": {run: toStdout(runRecoverBrokerInfo), usage: recoverBrokerInfoUsage},
	"gather":              {run: toStdout(runGather), usage: gatherUsage},

	"benchmark": {run: runBenchmark, usage: "data path against baselines, and dnsd against CoreDNS: snorkel benchmark throughput|latency|all [--transport …] [--globalnet] [--baseline …] [--reps 3] [--out DIR] [--kubecontexts C1,C2] | dns | report DIR"},

	"lab-pod":  {run: runLabPod, hidden: true},
	"perf-pod": {run: runPerfPod, hidden: true},
}

// toStdout runs a command that reports to a writer, which its tests
// give, with the standard output.
func toStdout(run func(args []string, out io.Writer) error) func(args []string) error {
	return func(args []string) error { return run(args, os.Stdout) }
}

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	if len(os.Args) < 2 {
		usage()
		os.Exit(2)
	}
	global, name, args, err := splitCommandLine(os.Args[1:])
	switch {
	case errors.Is(err, flag.ErrHelp):
		usage()
		return
	case err != nil:
		fmt.Fprintf(os.Stderr, "snorkel: %v\n\n", err)
		usage()
		os.Exit(2)
	}
	cmd, ok := commands[name]
	if !ok {
		fmt.Fprintf(os.Stderr, "snorkel: unknown command %q\n\n", name)
		usage()
		os.Exit(2)
	}
	if err := cmd.run(withGlobalFlags(args, global)); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return
		}
		fmt.Fprintf(os.Stderr, "snorkel %s: %v\n", name, err)
		os.Exit(1)
	}
}

func usage() {
	var names []string
	for n, c := range commands {
		if !c.hidden {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	var b strings.Builder
	b.WriteString("usage: snorkel [global flags] COMMAND [flags]\n\n")
	b.WriteString("global flags, before the command as subctl takes them, or after it:\n")
	for _, f := range globalFlags {
		fmt.Fprintf(&b, "  --%-12s %s\n", f.name+" "+f.arg, f.usage)
	}
	b.WriteString("\ncommands:\n")
	for _, n := range names {
		fmt.Fprintf(&b, "  %-14s %s\n", n, commands[n].usage)
	}
	fmt.Fprint(os.Stderr, b.String())
}

func runVersion(args []string) error {
	fs := flag.NewFlagSet("version", flag.ContinueOnError)
	if err := parseFlags(fs, args, nil, os.Stdout); err != nil {
		return err
	}
	fmt.Println("snorkel", version)
	return nil
}
