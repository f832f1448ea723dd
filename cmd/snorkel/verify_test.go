package main

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

func TestVerifyRefusesWhatItCannotDo(t *testing.T) {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["c1"] = &clientcmdapi.Cluster{Server: "https://127.0.0.1:1"}
	cfg.AuthInfos["c1"] = &clientcmdapi.AuthInfo{Token: "t"}
	cfg.Contexts["c1"] = &clientcmdapi.Context{Cluster: "c1", AuthInfo: "c1"}
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, kubeconfig); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		args    []string
		wantErr string
	}{
		{"no target cluster", []string{"--context", "c1"}, "--tocontext is required"},
		{"a verification Snorkel does not run", []string{"--tocontext", "c2", "--only", "gateway-failover"}, "--only gateway-failover: Snorkel verifies no gateway failover"},
		{"a timeout too short for pods", []string{"--tocontext", "c2", "--timeout", "1s"}, "--timeout 1s is too short"},
		{"a namespace prefix that names no namespace", []string{"--tocontext", "c2", "--namespace-prefix", "Verify_"}, `--namespace-prefix "Verify_" makes no namespace name`},
		{"no current context", []string{"--kubeconfig", kubeconfig, "--tocontext", "c1"}, "--context: --kubeconfig " + kubeconfig + " has no current context"},
		{"an unknown target context", []string{"--kubeconfig", kubeconfig, "--context", "c1", "--tocontext", "c2"}, `--tocontext: no context named "c2"`},
		{"an unreachable cluster", []string{"--kubeconfig", kubeconfig, "--context", "c1", "--tocontext", "c1"}, `cannot reach context "c1" at https://127.0.0.1:1`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			err := runVerify(tc.args, &out)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("err = %v, want one with %q", err, tc.wantErr)
			}
		})
	}
}
