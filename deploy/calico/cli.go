package calico

import (
	"context"
	"errors"
	"io"
	"time"

	"k8s.io/client-go/rest"

	"github.com/snorkel-net/snorkel/controller/api"
	"github.com/snorkel-net/snorkel/controller/broker"
)

// IPPoolsCommand is what `snorkel calico ippools` is asked to do: the
// cluster to write the IPPools of, and where the broker is, either a
// broker-info.subm or a kubeconfig context of the broker cluster.
type IPPoolsCommand struct {
	// Cluster is the cluster the IPPools are for (its --clusterid).
	Cluster string
	// BrokerInfo reaches the broker with the token of this file.
	BrokerInfo string
	// Kubeconfig and Context name the broker cluster, instead of
	// BrokerInfo; Namespace is its broker namespace, default
	// api.DefaultBrokerNamespace.
	Kubeconfig, Context, Namespace string
}

// RunIPPools is `snorkel calico ippools`: it reads the clusters from the
// broker and writes the IPPools of c.Cluster to out as YAML.
func RunIPPools(c IPPoolsCommand, out io.Writer) error {
	if c.Cluster == "" {
		return errors.New("--cluster is required: name the cluster the IPPools are for, as given to `snorkel join --clusterid`")
	}
	if err := ValidateClusterID(c.Cluster); err != nil {
		return err
	}
	var cfg *rest.Config
	ns := c.Namespace
	switch {
	case c.BrokerInfo != "" && (c.Kubeconfig != "" || c.Context != ""):
		return errors.New("give either --broker-info or --kubeconfig/--context, not both")
	case c.BrokerInfo != "":
		info, err := broker.ReadInfoFile(c.BrokerInfo)
		if err != nil {
			return err
		}
		cfg, ns = info.RESTConfig(), info.Namespace()
	case c.Kubeconfig != "" || c.Context != "":
		var err error
		if cfg, err = broker.LoadKubeconfig(c.Kubeconfig, c.Context); err != nil {
			return err
		}
		if ns == "" {
			ns = api.DefaultBrokerNamespace
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
	pools, err := Pools(c.Cluster, clusters)
	if err != nil {
		return err
	}
	b, err := YAML(c.Cluster, pools)
	if err != nil {
		return err
	}
	_, err = out.Write(b)
	return err
}
