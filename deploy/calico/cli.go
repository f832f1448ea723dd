package calico

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"k8s.io/client-go/rest"

	"github.com/snorkel-net/snorkel/controller/api"
	"github.com/snorkel-net/snorkel/controller/broker"
)

// syntax is how the command is called.
const syntax = "snorkel calico ippools --cluster ID (--broker-info broker-info.subm | --kubeconfig F --context C [--namespace NS])"

// Usage is the command's line in the snorkel command list.
const Usage = "print the Calico IPPools a cluster needs for the others: " + syntax

// Run is `snorkel calico ippools`: it reads the clusters from the broker
// and writes the IPPools of --cluster to out as YAML.
func Run(args []string, out io.Writer) error {
	if len(args) == 0 || args[0] != "ippools" {
		return fmt.Errorf("usage: %s", syntax)
	}
	fs := flag.NewFlagSet("calico ippools", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	cluster := fs.String("cluster", "", "the cluster the IPPools are for (its --clusterid)")
	infoFile := fs.String("broker-info", "", "reach the broker with the token of this broker-info.subm")
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig file of the broker cluster (instead of --broker-info)")
	kubeContext := fs.String("context", "", "kubeconfig context of the broker cluster (instead of --broker-info)")
	namespace := fs.String("namespace", api.DefaultBrokerNamespace, "broker namespace, with --kubeconfig/--context")
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
	if *cluster == "" {
		return errors.New("--cluster is required: name the cluster the IPPools are for, as given to `snorkel join --clusterid`")
	}
	if err := ValidateClusterID(*cluster); err != nil {
		return err
	}
	var cfg *rest.Config
	ns := *namespace
	switch {
	case *infoFile != "" && (*kubeconfig != "" || *kubeContext != ""):
		return errors.New("give either --broker-info or --kubeconfig/--context, not both")
	case *infoFile != "":
		info, err := broker.ReadInfoFile(*infoFile)
		if err != nil {
			return err
		}
		cfg, ns = info.RESTConfig(), info.Namespace()
	case *kubeconfig != "" || *kubeContext != "":
		var err error
		if cfg, err = broker.LoadKubeconfig(*kubeconfig, *kubeContext); err != nil {
			return err
		}
	default:
		return errors.New("say where the broker is: --broker-info broker-info.subm, or --kubeconfig/--context of the broker cluster")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	clusters, err := ClustersFromBroker(ctx, cfg, ns)
	if err != nil {
		return err
	}
	pools, err := Pools(*cluster, clusters)
	if err != nil {
		return err
	}
	b, err := YAML(*cluster, pools)
	if err != nil {
		return err
	}
	_, err = out.Write(b)
	return err
}
