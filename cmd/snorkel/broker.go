package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"path"
	"strings"

	"github.com/snorkel-net/snorkel/controller/api"
	"github.com/snorkel-net/snorkel/controller/broker"
	"github.com/snorkel-net/snorkel/deploy"
	"github.com/snorkel-net/snorkel/transport"
)

// Usage lines of the two commands.
const (
	deployBrokerUsage = "set up a broker cluster: snorkel deploy-broker [--kubeconfig F] [--context C] [--globalnet] [--enable-clusterset-ip] [--clusterset-ip-cidr-range 243.0.0.0/8] [--namespace NS] [--out broker-info.subm]"
	joinUsage         = "join a cluster to a broker and run Snorkel in it: snorkel join broker-info.subm --clusterid ID [--kubeconfig F] [--context C] [--cable-driver esp|wireguard|vxlan] " +
		"[--globalnet-cidr CIDR | --globalnet-cluster-size N] [--enable-clusterset-ip] [--clusterset-ip-cidr CIDR] [--natt=false] [--nattport 4500] [--preferred-server] [--label-gateway=false] [--health-check=false] [--health-check-interval 1] [--health-check-max-packet-loss-count 5] [--custom-domains D1,D2] [--air-gapped] " +
		"[--load-balancer] [--pod-debug] [--broker-url URL] [--check-broker-certificate=false] [--image REF | --repository R --version V | --image-override snorkel=REF] [--no-deploy]"
)

// runDeployBroker is `snorkel deploy-broker`: it parses args into a
// broker.DeployBrokerCommand and runs it.
func runDeployBroker(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("deploy-broker", flag.ContinueOnError)
	var c broker.DeployBrokerCommand
	fs.StringVar(&c.Kubeconfig, "kubeconfig", "", "kubeconfig file of the broker cluster (default $KUBECONFIG or ~/.kube/config)")
	fs.StringVar(&c.Context, "context", "", "kubeconfig context of the broker cluster (default the current context)")
	o := &c.Broker
	fs.StringVar(&o.Namespace, "namespace", api.DefaultBrokerNamespace, "broker namespace")
	fs.BoolVar(&o.Globalnet, "globalnet", false, "turn on Globalnet, for clusters whose Pod or Service CIDRs overlap")
	fs.StringVar(&o.GlobalnetCIDRRange, "globalnet-cidr-range", broker.DefaultGlobalnetCIDRRange, "range the clusters' global CIDRs come from")
	fs.Uint64Var(&o.GlobalnetClusterSize, "default-globalnet-cluster-size", broker.DefaultGlobalnetClusterSize, "global IPs per cluster (rounded up to a power of two)")
	fs.Uint64Var(&o.GlobalnetClusterSize, "globalnet-cluster-size", broker.DefaultGlobalnetClusterSize, "the same as --default-globalnet-cluster-size, subctl's name")
	fs.BoolVar(&o.ClustersetIP, "enable-clusterset-ip", false, "give every exported service a clusterset IP (a VIP) by default; a cluster or a service can still say otherwise")
	fs.StringVar(&o.ClustersetIPCIDRRange, "clusterset-ip-cidr-range", broker.DefaultClustersetIPCIDRRange, "range the clusters' clusterset IP CIDRs come from (recorded even without --enable-clusterset-ip)")
	fs.StringVar(&o.BrokerURL, "broker-url", "", "broker API server URL members use (default the kubeconfig's server)")
	fs.StringVar(&c.PSKFrom, "ipsec-psk-from", "", "take the pre-shared key from this broker-info.subm instead of keeping or making one")
	fs.StringVar(&c.Out, "out", broker.InfoFileName, "where to write the broker information file")
	if err := parseFlags(fs, args, nil, out); err != nil {
		return err
	}
	return broker.RunDeployBroker(c, out)
}

// runJoin is `snorkel join`: it parses args into a broker.JoinCommand and
// runs it.
func runJoin(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("join", flag.ContinueOnError)
	var c broker.JoinCommand
	fs.StringVar(&c.Kubeconfig, "kubeconfig", "", "kubeconfig file of the joining cluster (default $KUBECONFIG or ~/.kube/config)")
	fs.StringVar(&c.Context, "context", "", "kubeconfig context of the joining cluster (default the current context)")
	o := &c.Join
	fs.StringVar(&o.ClusterID, "clusterid", "", "this cluster's ID in the clusterset (a DNS-1123 label)")
	fs.StringVar(&o.GlobalCIDR, "globalnet-cidr", "", "this cluster's global CIDR under Globalnet: any block of the broker's range no other cluster's overlaps (default the first free block)")
	fs.Uint64Var(&o.GlobalnetClusterSize, "globalnet-cluster-size", 0, "global IPs for this cluster under Globalnet, rounded up to a power of two; the first free block of that size is taken (default the broker's cluster size)")
	fs.BoolVar(&o.EnableClustersetIP, "enable-clusterset-ip", false, "give the services this cluster exports a clusterset IP unless their export says otherwise (default the broker's setting); not with Globalnet")
	fs.StringVar(&o.ClustersetIPCIDR, "clusterset-ip-cidr", "", "this cluster's block of the broker's clusterset IP range, free of other clusters' (default the first free /20)")
	fs.StringVar(&o.CableDriver, "cable-driver", api.DefaultCableDriver, "gateway transport: "+strings.Join(transport.Kinds, ", "))
	clusterCIDR := fs.String("clustercidr", "", "this cluster's Pod CIDRs, comma-separated (default what the cluster tells)")
	serviceCIDR := fs.String("servicecidr", "", "this cluster's Service CIDRs, comma-separated (default what the cluster tells)")
	fs.StringVar(&c.Member.Image, "image", deploy.ImageName+":"+version, "the Snorkel image the agent, the route agent and dnsd run; the default is the image of this binary's version")
	repository := fs.String("repository", path.Dir(deploy.ImageName), "subctl's image repository: the image is REPOSITORY/"+path.Base(deploy.ImageName)+":VERSION, unless --image gives it whole")
	imageVersion := fs.String("version", version, "subctl's image version: the tag of the image, with --repository")
	imageOverride := fs.String("image-override", "", "subctl's COMPONENT=IMAGE: Snorkel runs one image for every component, so only "+snorkelComponent+"=IMAGE, the same as --image IMAGE")
	gw := &o.Gateway
	natt := fs.Bool("natt", true, "NAT traversal: reach other clusters' gateways at their public IPs when they are behind NAT; false connects to their private IPs only")
	fs.IntVar(&gw.NATTPort, "nattport", api.DefaultNATTPort, "the gateway's UDP port (IPsec NAT-T, WireGuard or VXLAN), published to the other clusters")
	fs.BoolVar(&gw.PreferredServer, "preferred-server", false, "this cluster's gateway answers IKE rather than starting it (the IPsec server), unless the other side prefers that too")
	healthCheck := fs.Bool("health-check", true, "the gateway probes each remote gateway through the tunnel; false sends no probes")
	fs.IntVar(&gw.HealthCheckInterval, "health-check-interval", api.DefaultHealthCheckInterval, "seconds between the gateway's health probes to each remote gateway")
	fs.IntVar(&gw.HealthCheckMaxPacketLossCount, "health-check-max-packet-loss-count", api.DefaultHealthCheckMaxPacketLossCount, "unanswered health probes in a row after which a connection is an error")
	customDomains := fs.String("custom-domains", "", "DNS domains dnsd also serves, and CoreDNS forwards to it, besides clusterset.local, comma-separated")
	fs.BoolVar(&gw.AirGapped, "air-gapped", false, "the cluster reaches no service outside the clusterset: the agent learns its addresses from its node, its flags and the other gateways only")
	fs.BoolVar(&c.LabelGateway, "label-gateway", true, "label a worker node "+broker.GatewayLabel+"=true when no node is labelled")
	customCoreDNS := fs.String("coredns-custom-configmap", "", "[NAMESPACE/]NAME of the ConfigMap the cluster's CoreDNS imports server blocks from (e.g. AKS's coredns-custom; namespace default kube-system): the forwards to dnsd go there, under lighthouse.server, instead of into the Corefile")
	fs.BoolVar(&gw.LoadBalancer, "load-balancer", false, "put a Service of type LoadBalancer ("+api.GatewayLoadBalancer+") in front of the gateway's UDP ports; the agent publishes its ingress address as the public IP")
	fs.BoolVar(&gw.Debug, "pod-debug", false, "the agent logs at debug level (IKE's exchanges too)")
	ipsecDebug := fs.Bool("ipsec-debug", false, "the same as --pod-debug: Snorkel's IKE logs in the agent")
	operatorDebug := fs.Bool("operator-debug", false, "accepted as subctl takes it; changes nothing, as Snorkel has no operator (see --pod-debug)")
	checkBrokerCert := fs.Bool("check-broker-certificate", true, "check the broker's certificate against the broker-info file's CA or the system's roots; false connects without checking (join and the agent)")
	fs.StringVar(&c.BrokerURL, "broker-url", "", "the broker's API server, https://HOST[:PORT], instead of the broker-info file's")
	forceUDPEncaps := fs.Bool("force-udp-encaps", false, "accepted as subctl takes it; Snorkel's ESP is always encapsulated in UDP (RFC 3948), so it changes nothing")
	ikePort := fs.Int("ikeport", 0, "accepted as older subctl takes it; IKE shares --nattport with ESP (RFC 3948's non-ESP marker), so it changes nothing")
	ignoreRequirements := fs.Bool("ignore-requirements", false, "accepted as subctl takes it; Snorkel's join checks no requirement it could ignore")
	globalnet := fs.Bool("globalnet", true, "subctl's Globalnet for this cluster: it follows the broker; false is refused on a Globalnet broker")
	fs.BoolVar(&c.NoDeploy, "no-deploy", false, "only register the cluster and store the agent's configuration and RBAC; run the agent, the route agent and dnsd yourself (kubectl apply -k deploy/kustomize/member)")
	var files []string
	if err := parseFlags(fs, args, &files, out); err != nil {
		return err
	}
	if len(files) != 1 {
		return fmt.Errorf("name one broker information file, e.g. `snorkel join %s --clusterid cluster-a` (got %d)", broker.InfoFileName, len(files))
	}
	c.InfoFile = files[0]
	o.ClusterCIDRs = splitList(*clusterCIDR)
	o.ServiceCIDRs = splitList(*serviceCIDR)
	// In JoinOptions 0 means the default port; from the command line it
	// is a mistake.
	if err := api.ValidateNATTPort(gw.NATTPort); err != nil {
		return err
	}
	gw.NATTraversalOff, gw.HealthCheckOff = !*natt, !*healthCheck
	// In JoinOptions 0 means the default; from the command line it is a
	// mistake.
	for _, f := range []struct {
		name string
		v    int
	}{{"--health-check-interval", gw.HealthCheckInterval}, {"--health-check-max-packet-loss-count", gw.HealthCheckMaxPacketLossCount}} {
		if f.v < 1 {
			return fmt.Errorf("%s %d is out of range: use 1 or more", f.name, f.v)
		}
	}
	gw.CustomDomains = splitList(*customDomains)
	gw.Debug = gw.Debug || *ipsecDebug
	if *customCoreDNS != "" {
		var err error
		if gw.CoreDNSCustomConfigMap, err = api.ParseCoreDNSCustomConfigMap(*customCoreDNS); err != nil {
			return err
		}
	}
	o.BrokerInsecure = !*checkBrokerCert
	o.NoGlobalnet = !*globalnet
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if err := joinImage(&c.Member.Image, set, *repository, *imageVersion, *imageOverride); err != nil {
		return err
	}
	for _, n := range []struct {
		given bool
		note  string
	}{
		{*operatorDebug, "--operator-debug changes nothing: Snorkel has no operator; --pod-debug turns on the agent's debug logs"},
		{*forceUDPEncaps, "--force-udp-encaps changes nothing: Snorkel's ESP is always encapsulated in UDP"},
		{set["ikeport"] && *ikePort != gw.Port(), fmt.Sprintf("--ikeport %d changes nothing: IKE shares the gateway's UDP port %d (--nattport) with ESP", *ikePort, gw.Port())},
		{*ignoreRequirements, "--ignore-requirements changes nothing: Snorkel's join checks no requirement it could ignore"},
	} {
		if n.given {
			fmt.Fprintln(out, "note: "+n.note)
		}
	}
	return broker.RunJoin(c, out)
}

// snorkelComponent is the one component --image-override knows: Snorkel's
// image runs every workload.
const snorkelComponent = "snorkel"

// joinImage sets the image the workloads run from subctl's --repository,
// --version and --image-override, unless --image gives it; giving --image
// with any of them is refused, as it would silently win.
func joinImage(image *string, set map[string]bool, repository, tag, override string) error {
	if set["image"] {
		for _, f := range []string{"repository", "version", "image-override"} {
			if set[f] {
				return fmt.Errorf("--image %s and --%s both choose the image: give one of them", *image, f)
			}
		}
		return nil
	}
	if set["image-override"] {
		ref, err := imageOverride(override)
		if err != nil {
			return err
		}
		if set["repository"] || set["version"] {
			return fmt.Errorf("--image-override %s and --repository/--version both choose the image: give one of them", override)
		}
		*image = ref
		return nil
	}
	if set["repository"] || set["version"] {
		*image = strings.TrimSuffix(repository, "/") + "/" + path.Base(deploy.ImageName) + ":" + tag
	}
	return nil
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

// imageOverride reads subctl's --image-override COMPONENT=IMAGE, where the
// one component is Snorkel's image.
func imageOverride(override string) (string, error) {
	component, ref, ok := strings.Cut(override, "=")
	if !ok || component != snorkelComponent || ref == "" {
		return "", fmt.Errorf("--image-override %q: Snorkel runs one image for every component; give %s=IMAGE, e.g. %s=%s:%s", override, snorkelComponent, snorkelComponent, deploy.ImageName, version)
	}
	return ref, nil
}
