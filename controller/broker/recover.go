package broker

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/snorkel-net/snorkel/controller/api"
)

// RecoverCommand is what `snorkel recover-broker-info` is asked to do.
type RecoverCommand struct {
	// Kubeconfig and Context name a joined cluster, or the broker
	// cluster; empty means $KUBECONFIG or ~/.kube/config and its current
	// context.
	Kubeconfig, Context string
	// BrokerURL, if set, is the broker URL the file records
	// (--broker-url), instead of the one the cluster knows.
	BrokerURL string
	// Out is where to write the file; one already there is kept under a
	// name with the time appended, as subctl keeps it.
	Out string
}

// RunRecoverBrokerInfo is `snorkel recover-broker-info`: it runs
// RecoverInfo against the kubeconfig context and writes the file.
func RunRecoverBrokerInfo(c RecoverCommand, out io.Writer) error {
	if c.BrokerURL != "" {
		if err := checkURL(c.BrokerURL); err != nil {
			return fmt.Errorf("--broker-url %q is not the URL of an API server (%v): give one such as https://broker.example:6443", c.BrokerURL, err)
		}
	}
	cfg, err := LoadKubeconfig(c.Kubeconfig, c.Context)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	defer cancel()
	info, err := RecoverInfo(ctx, cfg, contextName(c.Kubeconfig, c.Context, cfg), out)
	if err != nil {
		return err
	}
	if c.BrokerURL != "" {
		info.BrokerURL = c.BrokerURL
	}
	st := newStatus(out)
	defer st.end()
	st.start("Saving broker info to file %q", c.Out)
	if _, err := os.Stat(c.Out); err == nil {
		backup := c.Out + "." + strings.ReplaceAll(time.Now().Format(time.RFC3339), ":", "_")
		if err := os.Rename(c.Out, backup); err != nil {
			return st.failure(fmt.Errorf("backing up the previous file: %w", err))
		}
		st.success("Backed up previous file %q to %q", c.Out, backup)
	}
	if err := info.WriteFile(c.Out); err != nil {
		return st.failure(err)
	}
	st.success("It holds the broker token and the IPsec pre-shared key, keep it secret; join a cluster with `snorkel join %s --clusterid ID`", c.Out)
	return nil
}

// RecoverInfo rebuilds the broker-info.subm content, telling out each step
// as subctl does, from the cluster cfg reaches (name is how the lines call
// it): from the broker, if the cluster holds it, with a fresh client token
// and the pre-shared key it keeps; else from the agent Secret of a joined
// cluster, whose broker token and key are the file's own, and from the
// broker that token reaches. Either way the broker tells whether Globalnet
// is on, and the file lists the components it offers.
func RecoverInfo(ctx context.Context, cfg *rest.Config, name string, out io.Writer) (*Info, error) {
	st := newStatus(out)
	defer st.end()
	kc, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	ac, err := api.LoadAgentConfig(ctx, kc, api.AgentNamespace)
	switch {
	case apierrors.IsNotFound(err):
		ac = nil
	case err != nil:
		return nil, err
	}
	ns := api.DefaultBrokerNamespace
	if ac != nil {
		ns = ac.BrokerNamespace
	}
	st.start("Checking if the Broker is installed on cluster %q in namespace %q", name, ns)
	var (
		brokerCfg *rest.Config
		recovered *Info
	)
	_, err = kc.CoreV1().ServiceAccounts(ns).Get(ctx, BrokerClientServiceAccount, metav1.GetOptions{})
	switch {
	case err == nil:
		brokerURL := cfg.Host + cfg.APIPath
		if ac != nil {
			brokerURL = ac.BrokerURL
		}
		if recovered, err = infoFromBroker(ctx, cfg, kc, ns, brokerURL, st); err != nil {
			return nil, st.failure(err)
		}
		brokerCfg = cfg
	case !apierrors.IsNotFound(err):
		return nil, st.failure(fmt.Errorf("reading ServiceAccount %s/%s: %w", ns, BrokerClientServiceAccount, err))
	case ac == nil:
		return nil, st.failure(fmt.Errorf("cluster %q has not joined a broker (no Secret %s/%s) and holds none (no ServiceAccount %s/%s): run recover-broker-info with the context of a joined cluster or of the broker",
			name, api.AgentNamespace, api.AgentSecretName, ns, BrokerClientServiceAccount))
	default:
		st.warning("Broker not found. Trying to connect to the Broker installed on a different cluster")
		brokerCfg = ac.BrokerConfig()
		brokerCfg.Dial = cfg.Dial
		if err := probeBroker(ctx, brokerCfg, ns); err != nil {
			return nil, st.failure(fmt.Errorf("the broker at %s (from Secret %s/%s): %w; if it refuses the token, run `snorkel deploy-broker` again for a new file",
				ac.BrokerURL, api.AgentNamespace, api.AgentSecretName, err))
		}
		st.success("Found Broker installed on a different cluster in namespace %s", ns)
		if recovered, err = infoFromAgent(ac); err != nil {
			return nil, st.failure(err)
		}
		st.success("Retrieved the broker token and the IPsec pre-shared key from Snorkel on cluster %q", name)
	}

	st.start("Retrieving data to reconstruct %s", InfoFileName)
	bkc, err := kubernetes.NewForConfig(brokerCfg)
	if err != nil {
		return nil, st.failure(err)
	}
	g, _, err := readGlobalnet(ctx, bkc, ns)
	if err != nil {
		return nil, st.failure(err)
	}
	info := newInfo(recovered.BrokerURL, ns, recovered.Token(), recovered.CA(), recovered.IPSecPSK.Data[pskKey], g.Enabled)
	if ac != nil && !ac.ServiceDiscovery {
		// A broker subctl deployed without service discovery.
		info.ServiceDiscovery = false
		info.Components = slices.DeleteFunc(info.Components, func(c string) bool { return c == api.ComponentServiceDiscovery })
	}
	if err := info.Validate(); err != nil {
		return nil, st.failure(err)
	}
	st.success("Successfully retrieved the data (%s). Writing it to %s", describeGlobalnet(g), InfoFileName)
	return info, nil
}

// infoFromBroker is what the broker cluster itself holds: a new token of
// the client ServiceAccount, the CA the kubeconfig trusts, and the
// pre-shared key the broker keeps. Only the broker's Globalnet settings
// and components are left to fill in.
func infoFromBroker(ctx context.Context, cfg *rest.Config, kc kubernetes.Interface, ns, brokerURL string, st *status) (*Info, error) {
	psk, err := kc.CoreV1().Secrets(ns).Get(ctx, PSKSecretName, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("the pre-shared key Secret %s/%s: %w", ns, PSKSecretName, err)
	}
	if len(psk.Data[pskKey]) == 0 {
		return nil, fmt.Errorf("the pre-shared key Secret %s/%s: its data %q is empty", ns, PSKSecretName, pskKey)
	}
	ca, err := configCA(cfg)
	if err != nil {
		return nil, err
	}
	secs := int64(DefaultTokenExpiry / time.Second)
	tr, err := kc.CoreV1().ServiceAccounts(ns).CreateToken(ctx, BrokerClientServiceAccount,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &secs}}, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("requesting a token for ServiceAccount %s/%s: %w", ns, BrokerClientServiceAccount, err)
	}
	st.success("Found the Broker; a new client token of ServiceAccount %s/%s is valid until %s", ns, BrokerClientServiceAccount, tr.Status.ExpirationTimestamp.UTC().Format(time.RFC3339))
	return newInfo(brokerURL, ns, tr.Status.Token, ca, psk.Data[pskKey], false), nil
}

// infoFromAgent is what a joined cluster's agent configuration holds of
// the file it joined with.
func infoFromAgent(ac *api.AgentConfig) (*Info, error) {
	psk, err := base64.StdEncoding.DecodeString(ac.PSK)
	if err != nil || len(psk) == 0 {
		return nil, errors.New("the agent Secret's pre-shared key is not the base64 of a key: run `snorkel join` for this cluster again")
	}
	return newInfo(ac.BrokerURL, ac.BrokerNamespace, ac.BrokerToken, ac.BrokerCA, psk, false), nil
}
