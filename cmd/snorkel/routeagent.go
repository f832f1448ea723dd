package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/client-go/dynamic"

	"github.com/snorkel-net/snorkel/controller/api"
	"github.com/snorkel-net/snorkel/controller/broker"
	"github.com/snorkel-net/snorkel/controller/routeagent"
)

const routeAgentUsage = "every node's route agent, carrying its pods' traffic for the remote clusters to the active gateway past the CNI's masquerade: " +
	"snorkel route-agent [--kubeconfig F] [--context C] [--namespace NS] [--node-name N] [--clusterset-ip-cidr-range CIDR]; remove its routes and nftables table from the node: snorkel route-agent --uninstall"

func runRouteAgent(args []string) error {
	fs := flag.NewFlagSet("route-agent", flag.ContinueOnError)
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig file of this cluster (default $KUBECONFIG or ~/.kube/config, else the in-cluster ServiceAccount)")
	kubeContext := fs.String("context", "", "kubeconfig context (default the current context)")
	namespace := fs.String("namespace", api.AgentNamespace, "the namespace of the gateway agents' Gateways")
	nodeName := fs.String("node-name", os.Getenv("NODE_NAME"), "this node's name, as the Gateways name the gateway nodes (default $NODE_NAME)")
	clustersetRange := fs.String("clusterset-ip-cidr-range", os.Getenv("CLUSTERSET_IP_CIDR_RANGE"),
		"the broker's clusterset IP range, routed via the active gateway, when this cluster has a clusterset IP block (default $CLUSTERSET_IP_CIDR_RANGE, which the DaemonSet takes from the agent Secret; empty routes none)")
	uninstall := fs.Bool("uninstall", false, fmt.Sprintf("remove the routes of protocol %d and the nftables table ip %s from this node, and exit; "+
		"run it only once the route agent no longer runs here", routeagent.RouteProtocol, routeagent.TableName))
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q: snorkel route-agent takes flags only", fs.Arg(0))
	}
	if *uninstall {
		return uninstallRouteAgent()
	}
	if *nodeName == "" {
		return errors.New("--node-name is empty: pass this node's name, or set NODE_NAME (the DaemonSet sets it from spec.nodeName)")
	}
	var csRange netip.Prefix
	if *clustersetRange != "" {
		p, err := netip.ParsePrefix(*clustersetRange)
		if err != nil || !p.Addr().Is4() || p != p.Masked() {
			return fmt.Errorf("--clusterset-ip-cidr-range %q is not an IPv4 network: give one such as 243.0.0.0/8, or leave it empty", *clustersetRange)
		}
		csRange = p
	}
	local, err := broker.LoadKubeconfig(*kubeconfig, *kubeContext)
	if err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(local)
	if err != nil {
		return err
	}
	ra, err := routeagent.New(routeagent.Config{
		Dynamic:           dyn,
		Namespace:         *namespace,
		NodeName:          *nodeName,
		ClustersetIPRange: csRange,
		Logger:            slog.New(slog.NewTextHandler(os.Stderr, nil)),
	})
	if err != nil {
		return err
	}
	// SIGTERM ends the route agent and leaves its routes and table: pods
	// keep reaching the remote clusters while the DaemonSet rolls.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	return ra.Run(ctx)
}

// uninstallRouteAgent is the route agent's part of taking Snorkel off a
// node: what it set outlives it on purpose.
func uninstallRouteAgent() error {
	routes, table, err := routeagent.Uninstall()
	for _, p := range routes {
		fmt.Printf("removed the route to %s\n", p)
	}
	if table {
		fmt.Printf("removed nftables table ip %s\n", routeagent.TableName)
	}
	if err != nil {
		return err
	}
	if len(routes) == 0 && !table {
		fmt.Println("no route agent routes or nftables table on this node")
	}
	return nil
}
