package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/snorkel-net/snorkel/gateway"
)

const showUsage = `usage: snorkel show connections|endpoints|gateways|networks|brokers|versions|all
                    [--kubeconfig F] [--context C | --contexts C1,C2] [--namespace NS]
       snorkel show flows [--gateway URL]

connections, endpoints, gateways, networks, brokers, versions and all read
what Snorkel keeps in each cluster (the agent configuration, the Gateway
objects, the broker's Globalnet settings) and print it as subctl's show
commands do: every context of the kubeconfig, one per cluster, unless
--context or --contexts picks them. See snorkel show VIEW -h.

flows prints a running gateway's Globalnet connection-tracking table, read
from its debug listener (--debug-address of snorkel gateway and snorkel
agent): per flow the protocol, the direction (out: a local pod started it;
in: a remote cluster did), the tuple of its first packet and of its
replies as they arrive, the state, age and idle time, and the rule that
gave it its global address. --gateway is that listener's URL, default
http://127.0.0.1:9899; the listener is on loopback, so run this on the
gateway node (or in its network namespace).
`

// runShow is `snorkel show`.
func runShow(args []string) error {
	fs := flag.NewFlagSet("show", flag.ContinueOnError)
	fs.Usage = func() { fmt.Fprint(fs.Output(), showUsage) }
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		fs.Usage()
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help") {
			return flag.ErrHelp
		}
		return fmt.Errorf("name what to show: connections, endpoints, gateways, networks, brokers, versions, all or flows")
	}
	what, args := args[0], args[1:]
	if isKubeView(what) {
		return runShowKube(what, args)
	}
	base := fs.String("gateway", "http://"+defaultDebugAddress, "URL of the gateway's debug listener (its --debug-address)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q; see snorkel show -h", fs.Arg(0))
	}
	switch what {
	case "flows":
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		flows, err := fetchFlows(ctx, *base)
		if err != nil {
			return err
		}
		return printFlows(os.Stdout, flows)
	default:
		return fmt.Errorf("unknown %q; snorkel show knows: connections, endpoints, gateways, networks, brokers, versions, all, flows", what)
	}
}

// fetchFlows reads /flows from the gateway at base.
func fetchFlows(ctx context.Context, base string) ([]gateway.FlowStatus, error) {
	url := strings.TrimSuffix(base, "/") + "/flows"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, fmt.Errorf("--gateway %q: %w", base, err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("cannot reach the gateway's debug listener (is --debug-address set, and is this its node or network namespace?): %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s: %s", url, resp.Status, strings.TrimSpace(string(body)))
	}
	var flows []gateway.FlowStatus
	if err := json.Unmarshal(body, &flows); err != nil {
		return nil, fmt.Errorf("GET %s: not a flow list: %w", url, err)
	}
	return flows, nil
}

func printFlows(w io.Writer, flows []gateway.FlowStatus) error {
	if len(flows) == 0 {
		_, err := fmt.Fprintln(w, "no flows")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "PROTO\tDIR\tORIGINAL\tREPLY\tSTATE\tAGE\tIDLE\tRULE")
	for _, f := range flows {
		dir := "out"
		if f.Inbound {
			dir = "in"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s → %s\t%s → %s\t%s\t%s\t%s\t%s\n", f.Protocol, dir,
			f.Original.Src, f.Original.Dst, f.Reply.Src, f.Reply.Dst, f.State,
			seconds(f.AgeSeconds), seconds(f.IdleSeconds), f.Rule)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "%d flows\n", len(flows))
	return err
}

func seconds(s float64) string {
	return (time.Duration(s) * time.Second).String()
}
