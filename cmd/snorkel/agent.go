package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/snorkel-net/snorkel/controller/agent"
	"github.com/snorkel-net/snorkel/controller/api"
	submv1 "github.com/snorkel-net/snorkel/controller/api/v1"
	"github.com/snorkel-net/snorkel/controller/broker"
	"github.com/snorkel-net/snorkel/controller/natdiscovery"
	"github.com/snorkel-net/snorkel/gateway"
	"github.com/snorkel-net/snorkel/transport"
	"github.com/snorkel-net/snorkel/transport/wireguard"
)

func runAgent(args []string) error {
	fs := flag.NewFlagSet("agent", flag.ContinueOnError)
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig file of this cluster (default $KUBECONFIG or ~/.kube/config)")
	kubeContext := fs.String("context", "", "kubeconfig context (default the current context)")
	namespace := fs.String("namespace", api.AgentNamespace, "the agent's namespace, where snorkel join put its configuration")
	nodeName := fs.String("node-name", os.Getenv("NODE_NAME"), "this gateway node's name (default $NODE_NAME, else the host name)")
	privateIP := fs.String("private-ip", "", "this node's address between gateways (default the local address that reaches the broker)")
	publicIP := fs.String("public-ip", "", "the address other clusters reach this node at across NAT (default the node's "+agent.PublicIPAnnotation+" annotation, else what NAT discovery learns)")
	discoveryPort := fs.Int("natt-discovery-port", natdiscovery.DefaultPort, "the UDP port of NAT discovery, served on the private IP and published to the other gateways")
	leaseDuration := fs.Duration("lease-duration", agent.DefaultLeaseDuration, "how long the active gateway's Lease holds once it stops renewing it: a gateway that dies is replaced this long after its last renewal (whole seconds, as a Lease records it)")
	renewDeadline := fs.Duration("renew-deadline", agent.DefaultRenewDeadline, "how long the active gateway keeps trying to renew its Lease before it steps down; below --lease-duration")
	retryPeriod := fs.Duration("retry-period", agent.DefaultRetryPeriod, "how often every gateway tries to acquire or renew the Lease")
	syncPort := fs.Int("sync-port", gateway.DefaultSyncPort, "the TCP port on the private IP where, under Globalnet, the active gateway serves its connection tracking to the passive ones")
	healthCheckIP := fs.String("health-check-ip", "", "this gateway's address on its TUN device, published for other gateways' health probes (default the node's address in the cluster's Pod CIDRs, else --private-ip; none when the cluster joined with --health-check=false)")
	keyFile := fs.String("wireguard-key-file", "/var/lib/snorkel/wireguard.key", "WireGuard private key, made if missing (wireguard cable driver only)")
	tunName := fs.String("tun", gateway.DefaultTUNName, "the gateway's TUN device")
	metrics := fs.String("metrics-address", fmt.Sprintf(":%d", agent.DefaultMetricsPort), "where the gateway serves /metrics and /healthz; empty for none")
	debug := addDebugFlags(fs)
	out := fs.String("dataplane-config-out", "", "write each gateway configuration to this file, as snorkel gateway --config reads it, instead of running the gateway in this process")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q: snorkel agent takes flags only", fs.Arg(0))
	}
	local, err := broker.LoadKubeconfig(*kubeconfig, *kubeContext)
	if err != nil {
		return err
	}
	kc, err := kubernetes.NewForConfig(local)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	member, err := api.LoadAgentConfig(ctx, kc, *namespace)
	if err != nil {
		return err
	}
	if *privateIP == "" {
		if *privateIP, err = addressTowards(member.BrokerURL); err != nil {
			return fmt.Errorf("cannot tell this node's address (%w): pass --private-ip", err)
		}
	}
	if *healthCheckIP == "" && !member.HealthCheckOff {
		*healthCheckIP = agent.HealthCheckAddress(member.ClusterCIDRs, *privateIP, agent.InterfaceAddrs(*tunName))
	}
	if *publicIP == "" {
		if *publicIP, err = annotatedPublicIP(ctx, kc, *nodeName); err != nil {
			return err
		}
	}
	if *publicIP == "" && member.LoadBalancer {
		logger := slog.New(slog.NewTextHandler(os.Stderr, logOptions(member)))
		if *publicIP, err = loadBalancerIP(ctx, kc, *namespace, net.DefaultResolver, logger); err != nil {
			return err
		}
	}
	var backend map[string]string
	gw := gateway.Spec{TUN: gateway.TUNSpec{Name: *tunName}}
	if member.CableDriver == transport.WireGuard {
		_, pub, err := wireguard.LoadOrCreateKey(*keyFile)
		if err != nil {
			return fmt.Errorf("--wireguard-key-file: %w", err)
		}
		backend = map[string]string{agent.BackendConfigPublicKey: pub.String()}
		gw.Transport.WireGuard = &gateway.WireGuardSpec{PrivateKeyFile: *keyFile}
	}
	// One registry serves the agent's metrics (service sync, Globalnet)
	// and the in-process gateway's.
	reg := prometheus.NewRegistry()
	var dp agent.Dataplane = configFile(*out)
	if *out == "" {
		log := slog.New(slog.NewTextHandler(os.Stderr, logOptions(member))).With("cluster", member.ClusterID)
		tuneRuntime()
		r := gateway.NewRunner(log)
		defer r.Close()
		reg.MustRegister(r)
		if *metrics != "" {
			srv, err := listenHTTP("--metrics-address", *metrics, agentMetrics(reg), metricsLimits)
			if err != nil {
				return err
			}
			defer srv.Close()
		}
		dbg, err := debug.serve(r.DebugHandler())
		if err != nil {
			return err
		}
		if dbg != nil {
			defer dbg.Close()
		}
		dp = inProcess{r}
	}
	a, err := agent.New(agent.Config{
		Member:           member,
		Local:            kc,
		LocalConfig:      local,
		Namespace:        *namespace,
		Identity:         *nodeName,
		PrivateIP:        *privateIP,
		PublicIP:         *publicIP,
		NATDiscoveryPort: *discoveryPort,
		SyncPort:         *syncPort,
		Election:         agent.Election{LeaseDuration: *leaseDuration, RenewDeadline: *renewDeadline, RetryPeriod: *retryPeriod},
		HealthCheckIP:    *healthCheckIP,
		BackendConfig:    backend,
		Gateway:          gw,
		Dataplane:        dp,
		Registerer:       reg,
		Version:          version,
		Logger:           slog.New(slog.NewTextHandler(os.Stderr, logOptions(member))),
	})
	if err != nil {
		return err
	}
	return a.Run(ctx)
}

// annotatedPublicIP is the public IP the node's PublicIPAnnotation sets, or
// "" when it has none.
// loadBalancerPoll is how often the agent looks for the load balancer's
// address while the cloud has not given it one.
const loadBalancerPoll = 2 * time.Second

// loadBalancerIP waits for the ingress address of the gateway's load
// balancer (join --load-balancer), the public IP a gateway behind it
// publishes, as Submariner's lb: resolver reads it: an IP, or a host name
// resolved to its first IPv4 address.
func loadBalancerIP(ctx context.Context, kc kubernetes.Interface, namespace string, resolver *net.Resolver, log *slog.Logger) (string, error) {
	t := time.NewTicker(loadBalancerPoll)
	defer t.Stop()
	for waited := 0; ; waited++ {
		svc, err := kc.CoreV1().Services(namespace).Get(ctx, api.GatewayLoadBalancer, metav1.GetOptions{})
		if err == nil {
			for _, in := range svc.Status.LoadBalancer.Ingress {
				if a, err := netip.ParseAddr(in.IP); err == nil && a.Is4() {
					log.Info("the gateway's public IP is its load balancer's", "service", namespace+"/"+api.GatewayLoadBalancer, "publicIP", a)
					return a.String(), nil
				}
				if in.Hostname == "" {
					continue
				}
				addrs, rerr := resolver.LookupNetIP(ctx, "ip4", in.Hostname)
				if rerr == nil && len(addrs) > 0 {
					a := addrs[0].Unmap()
					log.Info("the gateway's public IP is its load balancer's", "service", namespace+"/"+api.GatewayLoadBalancer, "hostname", in.Hostname, "publicIP", a)
					return a.String(), nil
				}
				err = fmt.Errorf("its ingress host name %s: %w", in.Hostname, rerr)
			}
		}
		if err == nil {
			err = errors.New("the cloud has given it no ingress address yet")
		}
		if waited%15 == 0 {
			log.Warn("waiting for the gateway's load balancer (the cluster joined with --load-balancer); pass --public-ip to skip it", "service", namespace+"/"+api.GatewayLoadBalancer, "err", err)
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("no public IP from the load balancer %s/%s: %w", namespace, api.GatewayLoadBalancer, ctx.Err())
		case <-t.C:
		}
	}
}

// logOptions are the agent's log settings: debug level when the cluster
// joined with --pod-debug or --ipsec-debug.
func logOptions(member *api.AgentConfig) *slog.HandlerOptions {
	if member.Debug {
		return &slog.HandlerOptions{Level: slog.LevelDebug}
	}
	return nil
}

func annotatedPublicIP(ctx context.Context, kc kubernetes.Interface, node string) (string, error) {
	if node == "" {
		node, _ = os.Hostname()
	}
	n, err := kc.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		// A node the cluster does not list (the agent run outside
		// Kubernetes, as the lab runs it) carries no annotation.
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("reading node %s for its %s annotation (pass --node-name or --public-ip): %w", node, agent.PublicIPAnnotation, err)
	}
	v, ok := n.Annotations[agent.PublicIPAnnotation]
	if !ok {
		return "", nil
	}
	return agent.ParsePublicIPAnnotation(v)
}

// agentMetrics serves /metrics from reg and /healthz, which answers while
// the agent runs, active or passive.
func agentMetrics(reg *prometheus.Registry) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Write([]byte("ok\n"))
	})
	return mux
}

// addressTowards is the local address the kernel would send from to reach
// the host of rawURL. Connecting a UDP socket sends nothing.
func addressTowards(rawURL string) (string, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "", err
	}
	port := u.Port()
	if port == "" {
		port = "443"
	}
	c, err := net.DialTimeout("udp", net.JoinHostPort(u.Hostname(), port), 5*time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).IP.String(), nil
}

// configFile is a Dataplane that writes each configuration to a file,
// replacing it atomically. It reports no connections.
type configFile string

func (f configFile) Apply(_ context.Context, s *gateway.Spec) error {
	b, err := yaml.Marshal(s.Config())
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(string(f)), ".snorkel-gateway-*.yaml")
	if err != nil {
		return fmt.Errorf("--dataplane-config-out: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return fmt.Errorf("--dataplane-config-out: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("--dataplane-config-out: %w", err)
	}
	if err := os.Rename(tmp.Name(), string(f)); err != nil {
		return fmt.Errorf("--dataplane-config-out: %w", err)
	}
	return nil
}

func (configFile) Status() []agent.RemoteStatus { return nil }

// inProcess is the gateway running in the agent's process.
type inProcess struct{ *gateway.Runner }

// Status reports each remote as the gateway sees it: from its health
// probes, with their round-trip times, or, for a remote without a
// health-check address, connected while traffic arrives from it.
func (d inProcess) Status() []agent.RemoteStatus {
	st, ok := d.Stats()
	if !ok {
		return nil
	}
	out := make([]agent.RemoteStatus, 0, len(st.Remotes))
	for _, r := range st.Remotes {
		rs := agent.RemoteStatus{ID: r.Cluster, Status: submv1.ConnectionStatus(r.Status), Message: r.StatusMessage}
		if r.Health != nil && r.Health.RTT != nil {
			rtt := agent.RTT(*r.Health.RTT)
			rs.RTT = &rtt
		}
		// An IKE failure explains a connection that is not up; once
		// probes come back, the tunnel works whatever IKE last said.
		if r.IPsec != nil && r.IPsec.LastError != "" && rs.Status != submv1.Connected {
			rs.Status, rs.Message = submv1.ConnectionError, r.IPsec.LastError
		}
		out = append(out, rs)
	}
	return out
}
