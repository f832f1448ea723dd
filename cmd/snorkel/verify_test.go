package main

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/snorkel-net/snorkel/controller/verify"
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
		{"a negative packet size", []string{"--tocontext", "c2", "--packet-size", "-1"}, "--packet-size -1: give 0 (no transfer) to 1048576 bytes"},
		{"a connection timeout of nothing", []string{"--tocontext", "c2", "--connection-timeout", "0"}, "--connection-timeout 0: give 1 to 3600 seconds"},
		{"no connection attempt", []string{"--tocontext", "c2", "--connection-attempts", "0"}, "--connection-attempts 0: give 1 to 100"},
		{"a JUnit report in no directory", []string{"--tocontext", "c2", "--junit-report", "/nonexistent/report.xml"}, "--junit-report /nonexistent/report.xml: its directory /nonexistent does not exist"},
		{"an image override of another component", []string{"--tocontext", "c2", "--image-override", "submariner-nettest=quay.io/x/nettest:1"}, `--image-override "submariner-nettest=quay.io/x/nettest:1": Snorkel runs one image for every component; give snorkel=IMAGE`},
		{"an image given twice", []string{"--tocontext", "c2", "--image", "a/snorkel:1", "--image-override", "snorkel=b/snorkel:2"}, "--image a/snorkel:1 and --image-override snorkel=b/snorkel:2 both choose the image"},
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

func TestVerifyConnectionFlagsMapOntoTheChecksTries(t *testing.T) {
	for _, tc := range []struct {
		name           string
		set            []string
		timeout, tries uint
		want           verify.Tries
	}{
		{"neither flag leaves the tries to --timeout", nil, 0, 0, verify.Tries{}},
		{"both: each attempt bounded, all of them by the product", []string{"connection-timeout", "connection-attempts"}, 30, 3, verify.Tries{Attempt: 30 * time.Second, Retry: 90 * time.Second}},
		{"the timeout alone takes subctl's 2 attempts", []string{"connection-timeout"}, 20, 0, verify.Tries{Attempt: 20 * time.Second, Retry: 40 * time.Second}},
		{"the attempts alone take subctl's 60 s each", []string{"connection-attempts"}, 0, 1, verify.Tries{Attempt: time.Minute, Retry: time.Minute}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			set := map[string]bool{}
			for _, f := range tc.set {
				set[f] = true
			}
			var got verify.Tries
			if err := connectionTries(&got, set, tc.timeout, tc.tries); err != nil || got != tc.want {
				t.Errorf("tries %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}
