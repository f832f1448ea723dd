package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	"github.com/snorkel-net/snorkel/controller/agent"
	"github.com/snorkel-net/snorkel/controller/broker"
	"github.com/snorkel-net/snorkel/gateway"
	"github.com/snorkel-net/snorkel/transport/wireguard"
)

func init() {
	commands["agent"] = command{
		run: runAgent,
		usage: "a gateway node's agent: snorkel agent --dataplane-config-out FILE [--kubeconfig F] [--context C] [--namespace NS] " +
			"[--node-name N] [--private-ip IP] [--public-ip IP] (writes each gateway configuration to FILE, as `snorkel gateway --config` reads it)",
	}
}

func runAgent(args []string) error {
	fs := flag.NewFlagSet("agent", flag.ContinueOnError)
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig file of this cluster (default $KUBECONFIG or ~/.kube/config)")
	kubeContext := fs.String("context", "", "kubeconfig context (default the current context)")
	namespace := fs.String("namespace", broker.AgentNamespace, "the agent's namespace, where `snorkel join` put its configuration")
	nodeName := fs.String("node-name", os.Getenv("NODE_NAME"), "this gateway node's name (default $NODE_NAME, else the host name)")
	privateIP := fs.String("private-ip", "", "this node's address between gateways (default the local address that reaches the broker)")
	publicIP := fs.String("public-ip", "", "the address other clusters reach this node at across NAT (default none)")
	keyFile := fs.String("wireguard-key-file", "/var/lib/snorkel/wireguard.key", "WireGuard private key, made if missing (wireguard cable driver only)")
	out := fs.String("dataplane-config-out", "", "file that receives each gateway configuration the agent applies (required)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q: snorkel agent takes flags only", fs.Arg(0))
	}
	if *out == "" {
		return errors.New("--dataplane-config-out is required: name the file that receives the gateway configuration")
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = *kubeconfig
	local, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: *kubeContext}).ClientConfig()
	if err != nil {
		return fmt.Errorf("--kubeconfig/--context: %w", err)
	}
	kc, err := kubernetes.NewForConfig(local)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	member, err := broker.LoadAgentConfig(ctx, kc, *namespace)
	if err != nil {
		return err
	}
	if *privateIP == "" {
		if *privateIP, err = addressTowards(member.BrokerURL); err != nil {
			return fmt.Errorf("cannot tell this node's address (%w): pass --private-ip", err)
		}
	}
	var backend map[string]string
	gw := gateway.Config{}
	if member.CableDriver == broker.CableDriverWireGuard {
		_, pub, err := wireguard.LoadOrCreateKey(*keyFile)
		if err != nil {
			return fmt.Errorf("--wireguard-key-file: %w", err)
		}
		backend = map[string]string{agent.BackendConfigPublicKey: pub.String()}
		gw.Transport.WireGuard = &gateway.WireGuardConfig{PrivateKeyFile: *keyFile}
	}
	a, err := agent.New(agent.Config{
		Member:        member,
		Local:         kc,
		LocalConfig:   local,
		Namespace:     *namespace,
		Identity:      *nodeName,
		PrivateIP:     *privateIP,
		PublicIP:      *publicIP,
		BackendConfig: backend,
		Gateway:       gw,
		Dataplane:     configFile(*out),
		Version:       version,
		Logger:        slog.New(slog.NewTextHandler(os.Stderr, nil)),
	})
	if err != nil {
		return err
	}
	return a.Run(ctx)
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

func (f configFile) Apply(_ context.Context, cfg gateway.Config) error {
	b, err := yaml.Marshal(cfg)
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
