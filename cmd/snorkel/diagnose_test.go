package main

import (
	"bytes"
	"errors"
	"flag"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/snorkel-net/snorkel/controller/api"
	"github.com/snorkel-net/snorkel/controller/diagnose"
	"github.com/snorkel-net/snorkel/controller/kubelocal"
	"github.com/snorkel-net/snorkel/controller/kubelocal/kubetest"
)

func TestDiagnoseCommandLine(t *testing.T) {
	s := kubetest.Start(t, kubelocal.Options{Name: "kind-c1"})[0]
	run := func(args ...string) (string, error) {
		var out bytes.Buffer
		err := runDiagnose(args, &out)
		return out.String(), err
	}
	t.Run("subctl's flags, global ones before the verb too, reach an unjoined cluster", func(t *testing.T) {
		global, name, rest, err := splitCommandLine([]string{"--kubeconfig", s.Kubeconfig, "--context", "kind-c1", "diagnose", "all", "--verbose", "--validation-timeout", "30"})
		if err != nil || name != "diagnose" {
			t.Fatalf("%q %v", name, err)
		}
		out, err := run(withGlobalFlags(rest, global)...)
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		for _, want := range []string{" ✓ Checking Snorkel support for the Kubernetes version\n ✓ Kubernetes v1.37", ` ⚠ Snorkel is not installed in context "kind-c1"`} {
			if !strings.Contains(out, want) {
				t.Errorf("output lacks %q:\n%s", want, out)
			}
		}
	})
	t.Run("firewall takes subctl's subcommands and --remotecontext", func(t *testing.T) {
		out, err := run("firewall", "inter-cluster", "--kubeconfig", s.Kubeconfig, "--context", "kind-c1", "--remotecontext", "kind-c1")
		if err != nil || strings.Count(out, `Cluster "kind-c1"`) != 2 || !strings.Contains(out, " ⚠ Checking the firewall between the gateways") {
			t.Errorf("%v\n%s", err, out)
		}
	})
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no check names them", nil, "name a check: all, k8s-version, deployment"},
		{"an unknown check names the known ones", []string{"mtu"}, `unknown check "mtu"; choose one of all,`},
		{"--remotecontext needs --context", []string{"firewall", "nat-discovery", "--remotecontext", "c2"}, "--remotecontext needs --context"},
		{"--in-cluster excludes --context", []string{"cni", "--in-cluster", "--context", "c1"}, "give --in-cluster or --kubeconfig/--context/--contexts, not both"},
		{"a context the kubeconfig lacks", []string{"k8s-version", "--kubeconfig", s.Kubeconfig, "--context", "nope"}, `no context named "nope"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := run(tc.args...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want %q", err, tc.want)
			}
		})
	}
	t.Run("help is not an error", func(t *testing.T) {
		if out, err := run("-h"); !errors.Is(err, flag.ErrHelp) || !strings.Contains(out, "kube-proxy-mode") {
			t.Errorf("%v\n%s", err, out)
		}
	})
	t.Run("a failed check is an error, after every check ran", func(t *testing.T) {
		kc, err := kubernetes.NewForConfig(s.Config())
		if err != nil {
			t.Fatal(err)
		}
		ac := api.AgentConfig{ClusterID: "c1", BrokerURL: "https://127.0.0.1:1", BrokerNamespace: api.DefaultBrokerNamespace, BrokerToken: "t",
			PSK: "cHNr", CableDriver: "wireguard", ClusterCIDRs: []string{"10.8.0.0/16"}, ServiceCIDRs: []string{"10.96.0.0/16"}}
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: api.AgentNamespace}}
		if _, err := kc.CoreV1().Namespaces().Create(t.Context(), ns, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: api.AgentSecretName, Namespace: api.AgentNamespace}, Data: ac.SecretData()}
		if _, err := kc.CoreV1().Secrets(api.AgentNamespace).Create(t.Context(), sec, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		out, err := run("all", "--kubeconfig", s.Kubeconfig, "--context", "kind-c1")
		if !errors.Is(err, diagnose.ErrFailed) || strings.Count(out, " ✗ Checking") < 2 || !strings.Contains(out, "Checking service discovery") {
			t.Errorf("%v\n%s", err, out)
		}
	})
}
