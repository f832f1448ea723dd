package broker

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/bits"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/snorkel-net/snorkel/controller/api"
	"github.com/snorkel-net/snorkel/deploy"
	"github.com/snorkel-net/snorkel/transport"
)

// Usage lines of the two commands.
const (
	DeployBrokerUsage = "set up a broker cluster: snorkel deploy-broker [--kubeconfig F] [--context C] [--globalnet] [--namespace NS] [--out broker-info.subm]"
	JoinUsage         = "join a cluster to a broker and run Snorkel in it: snorkel join broker-info.subm --clusterid ID [--kubeconfig F] [--context C] [--cable-driver esp|wireguard|vxlan] [--image REF] [--no-deploy]"
)

// commandTimeout bounds one command's work against the API servers.
const commandTimeout = 5 * time.Minute

// RunDeployBroker is `snorkel deploy-broker`: it parses args, runs Deploy
// against the kubeconfig context, writes broker-info.subm and tells out
// what it did.
func RunDeployBroker(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("deploy-broker", flag.ContinueOnError)
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig file of the broker cluster (default $KUBECONFIG or ~/.kube/config)")
	kubeContext := fs.String("context", "", "kubeconfig context of the broker cluster (default the current context)")
	var o BrokerOptions
	fs.StringVar(&o.Namespace, "namespace", api.DefaultBrokerNamespace, "broker namespace")
	fs.BoolVar(&o.Globalnet, "globalnet", false, "turn on Globalnet, for clusters whose Pod or Service CIDRs overlap")
	fs.StringVar(&o.GlobalnetCIDRRange, "globalnet-cidr-range", DefaultGlobalnetCIDRRange, "range the clusters' global CIDRs come from")
	fs.Uint64Var(&o.GlobalnetClusterSize, "default-globalnet-cluster-size", DefaultGlobalnetClusterSize, "global IPs per cluster (rounded up to a power of two)")
	fs.Uint64Var(&o.GlobalnetClusterSize, "globalnet-cluster-size", DefaultGlobalnetClusterSize, "the same as --default-globalnet-cluster-size, subctl's name")
	fs.StringVar(&o.BrokerURL, "broker-url", "", "broker API server URL members use (default the kubeconfig's server)")
	pskFrom := fs.String("ipsec-psk-from", "", "take the pre-shared key from this broker-info.subm instead of keeping or making one")
	outFile := fs.String("out", InfoFileName, "where to write the broker information file")
	if err := parseFlags(fs, args, nil, out); err != nil {
		return err
	}
	if *pskFrom != "" {
		in, err := ReadInfoFile(*pskFrom)
		if err != nil {
			return fmt.Errorf("--ipsec-psk-from: %w", err)
		}
		o.PSK = in.IPSecPSK.Data[pskKey]
	}
	cfg, err := LoadKubeconfig(*kubeconfig, *kubeContext)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	defer cancel()
	d, err := Deploy(ctx, cfg, o)
	if err != nil {
		return err
	}
	if err := d.Info.WriteFile(*outFile); err != nil {
		return err
	}
	gn := "Globalnet off"
	if d.GlobalnetRange.IsValid() {
		gn = fmt.Sprintf("Globalnet on: %s, a /%d per cluster", d.GlobalnetRange, 32-bits.TrailingZeros64(d.GlobalnetClusterSize))
	}
	fmt.Fprintf(out, "broker ready at %s in namespace %s (%s)\n", d.Info.BrokerURL, d.Info.Namespace(), gn)
	fmt.Fprintf(out, "client token of ServiceAccount %s/%s valid until %s\n", d.Info.Namespace(), BrokerClientServiceAccount, d.TokenExpires.UTC().Format(time.RFC3339))
	fmt.Fprintf(out, "wrote %s: join each member with `snorkel join %s --clusterid ID`; it holds the broker token and the IPsec pre-shared key, keep it secret\n", *outFile, *outFile)
	return nil
}

// RunJoin is `snorkel join`: it parses args, runs Join against the
// kubeconfig context, then DeployMember unless --no-deploy, and tells out
// what it did.
func RunJoin(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("join", flag.ContinueOnError)
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig file of the joining cluster (default $KUBECONFIG or ~/.kube/config)")
	kubeContext := fs.String("context", "", "kubeconfig context of the joining cluster (default the current context)")
	var o JoinOptions
	fs.StringVar(&o.ClusterID, "clusterid", "", "this cluster's ID in the clusterset (a DNS-1123 label)")
	fs.StringVar(&o.GlobalCIDR, "globalnet-cidr", "", "this cluster's global CIDR under Globalnet (default the first free block)")
	fs.StringVar(&o.CableDriver, "cable-driver", api.DefaultCableDriver, "gateway transport: "+strings.Join(transport.Kinds, ", "))
	clusterCIDR := fs.String("clustercidr", "", "this cluster's Pod CIDRs, comma-separated (default what the cluster tells)")
	serviceCIDR := fs.String("servicecidr", "", "this cluster's Service CIDRs, comma-separated (default what the cluster tells)")
	var mo MemberOptions
	fs.StringVar(&mo.Image, "image", deploy.DefaultImage, "the Snorkel image the agent and dnsd run")
	noDeploy := fs.Bool("no-deploy", false, "only register the cluster and store the agent's configuration and RBAC; run the agent and dnsd yourself (kubectl apply -k deploy/kustomize/member)")
	var files []string
	if err := parseFlags(fs, args, &files, out); err != nil {
		return err
	}
	if len(files) != 1 {
		return fmt.Errorf("name one broker information file, e.g. `snorkel join %s --clusterid cluster-a` (got %d)", InfoFileName, len(files))
	}
	if !*noDeploy {
		if err := deploy.ValidateImage(mo.Image); err != nil {
			return err
		}
	}
	o.ClusterCIDRs = splitList(*clusterCIDR)
	o.ServiceCIDRs = splitList(*serviceCIDR)
	info, err := ReadInfoFile(files[0])
	if err != nil {
		return err
	}
	cfg, err := LoadKubeconfig(*kubeconfig, *kubeContext)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	defer cancel()
	ac, err := Join(ctx, cfg, info, o)
	if err != nil {
		return err
	}
	global := ""
	if ac.GlobalCIDR != "" {
		global = ", global CIDR " + ac.GlobalCIDR
	}
	fmt.Fprintf(out, "cluster %s joined the broker at %s (namespace %s): pods %s, services %s%s, cable driver %s\n",
		ac.ClusterID, ac.BrokerURL, ac.BrokerNamespace, strings.Join(ac.ClusterCIDRs, ","), strings.Join(ac.ServiceCIDRs, ","), global, ac.CableDriver)
	fmt.Fprintf(out, "agent configuration in Secret %s/%s, ServiceAccount %s\n", api.AgentNamespace, api.AgentSecretName, api.AgentServiceAccount)
	if *noDeploy {
		fmt.Fprintf(out, "not deployed (--no-deploy): run the agent and dnsd with `kubectl apply -k deploy/kustomize/member`, and forward %s to dnsd in the cluster's DNS\n", ClustersetZone)
		return nil
	}
	d, err := DeployMember(ctx, cfg, mo)
	if err != nil {
		return fmt.Errorf("cluster %q joined, but deploying Snorkel in it failed: %w; run the join again", ac.ClusterID, err)
	}
	printMemberDeployment(out, d)
	return nil
}

// printMemberDeployment tells what DeployMember did and what is left to
// the user.
func printMemberDeployment(out io.Writer, d *MemberDeployment) {
	fmt.Fprintf(out, "deployed %s: DaemonSet %s/%s on the nodes labelled %s=true, dnsd (Deployment %s) at %s\n",
		d.Image, api.AgentNamespace, AgentDaemonSet, GatewayLabel, DNSDeployment, d.DNSAddress)
	switch d.CoreDNS {
	case CoreDNSUpdated:
		fmt.Fprintf(out, "CoreDNS (%s/%s) now forwards %s to %s\n", metav1.NamespaceSystem, CoreDNSConfigMap, ClustersetZone, d.DNSAddress)
	case CoreDNSUnchanged:
		fmt.Fprintf(out, "CoreDNS (%s/%s) already forwards %s to %s\n", metav1.NamespaceSystem, CoreDNSConfigMap, ClustersetZone, d.DNSAddress)
	case CoreDNSNotFound:
		fmt.Fprintf(out, "no ConfigMap %s/%s: make the cluster's DNS forward %s to %s, e.g. with this Corefile section:\n%s",
			metav1.NamespaceSystem, CoreDNSConfigMap, ClustersetZone, d.DNSAddress, d.Stanza)
	}
	if len(d.GatewayNodes) == 0 {
		fmt.Fprintf(out, "no gateway node yet: label one with `kubectl label node NODE %s=true`\n", GatewayLabel)
	} else {
		fmt.Fprintf(out, "gateway nodes: %s\n", strings.Join(d.GatewayNodes, ", "))
	}
}

// parseFlags parses args, allowing positional arguments among the flags;
// they go to positional, and are refused if it is nil. -h prints the flags
// to out.
func parseFlags(fs *flag.FlagSet, args []string, positional *[]string, out io.Writer) error {
	fs.SetOutput(io.Discard)
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return flagHelp(fs, out)
			}
			return err
		}
		if fs.NArg() == 0 {
			return nil
		}
		if positional == nil {
			return fmt.Errorf("unexpected argument %q: %s takes flags only", fs.Arg(0), fs.Name())
		}
		*positional = append(*positional, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

// flagHelp prints the flags' help to out and returns flag.ErrHelp, which
// the command line takes as success.
func flagHelp(fs *flag.FlagSet, out io.Writer) error {
	fmt.Fprintf(out, "usage of snorkel %s:\n", fs.Name())
	fs.SetOutput(out)
	fs.PrintDefaults()
	return flag.ErrHelp
}

func splitList(s string) []string {
	var out []string
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			out = append(out, v)
		}
	}
	return out
}

// LoadKubeconfig returns the client configuration of a kubeconfig context:
// the file's (or the default files') current context if context is empty.
func LoadKubeconfig(path, kubeContext string) (*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if path != "" {
		rules.ExplicitPath = path
	}
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: kubeContext}).ClientConfig()
	if err != nil {
		where := "the kubeconfig"
		if path != "" {
			where = "--kubeconfig " + path
		}
		if kubeContext != "" {
			where += " --context " + kubeContext
		}
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	if cfg.QPS == 0 {
		// Installing the CRDs and RBAC is a burst of requests.
		cfg.QPS, cfg.Burst = 50, 100
	}
	return cfg, nil
}
