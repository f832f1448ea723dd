package gather

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"

	"github.com/snorkel-net/snorkel/controller/api"
	submv1 "github.com/snorkel-net/snorkel/controller/api/v1"
	"github.com/snorkel-net/snorkel/controller/broker"
	"github.com/snorkel-net/snorkel/controller/kubelocal"
	"github.com/snorkel-net/snorkel/controller/kubelocal/kubetest"
	"github.com/snorkel-net/snorkel/controller/show"
	"github.com/snorkel-net/snorkel/transport"
)

// agentPod is c1's agent pod: the API server knows it as running on
// gw-c1, but no kubelet runs there to serve its logs or port forwards.
const agentPod = "snorkel-agent-x7k2p"

// TestGather gathers from a broker, a member joined to it whose agent pod
// is known but whose node has no kubelet, and a cluster without Snorkel.
func TestGather(t *testing.T) {
	servers := kubetest.Start(t,
		kubelocal.Options{Name: "broker"},
		kubelocal.Options{Name: "c1", ServiceCIDR: "10.88.0.0/16"},
		kubelocal.Options{Name: "bare"})
	brk, c1, bare := servers[0], servers[1], servers[2]
	ctx := t.Context()
	d, err := broker.Deploy(ctx, brk.Config(), broker.BrokerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ac, err := broker.Join(ctx, c1.Config(), d.Info, broker.JoinOptions{
		ClusterID: "c1", CableDriver: transport.VXLAN, ClusterCIDRs: []string{"10.8.0.0/16"}, ServiceCIDRs: []string{"10.88.0.0/16"},
	})
	if err != nil {
		t.Fatal(err)
	}
	writeAgent(t, c1)
	target := func(s *kubelocal.Server) show.Target {
		return show.Target{Context: s.Name, Cluster: s.Name, Config: s.Config()}
	}

	t.Run("a joined cluster: objects, the broker's, and why the pod's logs and listeners are not there", func(t *testing.T) {
		dir := t.TempDir()
		var status bytes.Buffer
		if err := Run(ctx, []show.Target{target(c1)}, Options{Directory: dir, Status: &status}); err != nil {
			t.Fatalf("Run: %v\n%s", err, status.String())
		}
		files := listFiles(t, filepath.Join(dir, "c1"))
		for _, want := range []string{
			"secrets_submariner-operator_snorkel-agent.yaml",
			"daemonsets_submariner-operator_snorkel-agent.yaml",
			"pods_submariner-operator_" + agentPod + ".yaml",
			"gateways_submariner-operator_gw-c1.yaml",
			"clusters_" + ac.BrokerNamespace + "_c1.yaml",
			SummaryFile,
		} {
			if !slices.Contains(files, want) {
				t.Errorf("no %s among %v", want, files)
			}
		}
		for _, want := range []string{
			"Gathering information from cluster \"c1\"\n",
			" ⚠ Gathering connectivity logs\n",
			" ✓ Found 1 pods of the agent matching label selector \"app.kubernetes.io/name=snorkel-agent\"\n",
			" ⚠ Cannot read the log of pod " + agentPod + " on node \"gw-c1\" (the API server reads it from the node's kubelet): ",
			" ⚠ Cannot read /status of pod " + agentPod + " on node \"gw-c1\" through a port forward to port 9899: ",
			" ⚠ Cannot read /metrics of pod " + agentPod + " on node \"gw-c1\" through a port forward to port 9898: ",
			// Without Globalnet the gateway tracks no flows and answers 404.
			" ✓ Skipped /flows of pod " + agentPod + ": Globalnet is off in this cluster, and only Globalnet tracks flows\n",
			" ⚠ No pods of the route agent (label selector \"app=submariner-routeagent\") in namespace \"submariner-operator\": is its DaemonSet submariner-routeagent installed and scheduled?\n",
			" ⚠ No pods of dnsd (label selector \"app=submariner-lighthouse-coredns\") in namespace \"submariner-operator\": is its Deployment submariner-lighthouse-coredns installed and scheduled?\n",
			" ✓ Found 1 gateways in namespace \"submariner-operator\"\n",
			" ✓ Found 1 secrets in namespace \"submariner-operator\"\n",
			" ✓ Reading the broker at " + brk.URL + " that cluster \"c1\" joined\n",
			"Files are stored under directory \"" + filepath.Join(dir, "c1") + "\"\n",
		} {
			if !strings.Contains(status.String(), want) {
				t.Errorf("status lacks %q:\n%s", want, status.String())
			}
		}
		summary := readFile(t, filepath.Join(dir, "c1", SummaryFile))
		if !strings.Contains(summary, " ⚠ No pods of dnsd") || strings.Contains(summary, "Files are stored") {
			t.Errorf("summary.txt should hold the cluster's status lines:\n%s", summary)
		}
		secret := secretData(t, filepath.Join(dir, "c1", "secrets_submariner-operator_snorkel-agent.yaml"))
		if len(secret) != len(ac.SecretData()) {
			t.Errorf("redacted Secret has keys %v, want those of %v", secret, ac.SecretData())
		}
		for k, v := range secret {
			if v != Redacted {
				t.Errorf("key %s of the agent Secret is %q, not redacted", k, v)
			}
		}
		for _, f := range files {
			if s := readFile(t, filepath.Join(dir, "c1", f)); strings.Contains(s, ac.BrokerToken) || strings.Contains(s, base64.StdEncoding.EncodeToString([]byte(ac.BrokerToken))) {
				t.Errorf("%s holds the broker token", f)
			}
		}
	})

	t.Run("--include-sensitive-data keeps the agent Secret's values", func(t *testing.T) {
		dir := t.TempDir()
		o := Options{Directory: dir, Status: io.Discard, Modules: []string{Operator}, Types: []string{Resources}, IncludeSensitiveData: true}
		if err := Run(ctx, []show.Target{target(c1)}, o); err != nil {
			t.Fatal(err)
		}
		secret := secretData(t, filepath.Join(dir, "c1", "secrets_submariner-operator_snorkel-agent.yaml"))
		for k, v := range ac.SecretData() {
			if got := secret[k]; got != base64.StdEncoding.EncodeToString(v) {
				t.Errorf("key %s is %q, want the base64 of %q", k, got, v)
			}
		}
		if files := listFiles(t, filepath.Join(dir, "c1")); slices.ContainsFunc(files, func(f string) bool { return strings.HasPrefix(f, "gateways_") }) {
			t.Errorf("--module operator gathered connectivity objects: %v", files)
		}
	})

	t.Run("a cluster without Snorkel is reported, not fatal, beside one with it", func(t *testing.T) {
		dir := t.TempDir()
		var status bytes.Buffer
		if err := Run(ctx, []show.Target{target(bare), target(c1)}, Options{Directory: dir, Status: &status}); err != nil {
			t.Fatalf("Run: %v\n%s", err, status.String())
		}
		for _, want := range []string{
			"Gathering information from cluster \"bare\"\n ⚠ Snorkel is not installed in context \"bare\" (no Secret submariner-operator/snorkel-agent): gathering what exists\n",
			" ⚠ No pods of the agent (label selector \"app.kubernetes.io/name=snorkel-agent\") in namespace \"submariner-operator\": is its DaemonSet snorkel-agent installed and scheduled?\n",
			" ⚠ No gateways in namespace \"submariner-operator\": the cluster does not serve gateways.submariner.io (its CRD is not installed)\n",
			" ⚠ This cluster hosts no broker and has joined none\n",
			"Gathering information from cluster \"c1\"\n",
		} {
			if !strings.Contains(status.String(), want) {
				t.Errorf("status lacks %q:\n%s", want, status.String())
			}
		}
		if files := listFiles(t, filepath.Join(dir, "bare")); !slices.Equal(files, []string{SummaryFile}) {
			t.Errorf("bare cluster's directory holds %v, want only %s", files, SummaryFile)
		}
	})

	t.Run("an unreachable context fails the run and names it; the others are gathered", func(t *testing.T) {
		dir := t.TempDir()
		var status bytes.Buffer
		gone := show.Target{Context: "gone", Cluster: "gone", Err: os.ErrNotExist}
		err := Run(ctx, []show.Target{gone, target(c1)}, Options{Directory: dir, Status: &status})
		if err == nil || !strings.Contains(err.Error(), `"gone"`) {
			t.Errorf("Run returned %v, want it to name context gone", err)
		}
		if _, err := os.Stat(filepath.Join(dir, "c1", SummaryFile)); err != nil {
			t.Errorf("c1 not gathered: %v", err)
		}
	})

	t.Run("the tarball holds the directory, file for file", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "report")
		if err := Run(ctx, []show.Target{target(c1)}, Options{Directory: dir, Status: io.Discard}); err != nil {
			t.Fatal(err)
		}
		path := dir + ".tar.gz"
		if err := Tarball(dir, path); err != nil {
			t.Fatal(err)
		}
		got := untar(t, path)
		want := map[string]string{}
		for _, f := range listFiles(t, filepath.Join(dir, "c1")) {
			want["report/c1/"+f] = readFile(t, filepath.Join(dir, "c1", f))
		}
		if len(got) != len(want) {
			t.Errorf("tarball has %d files, directory %d", len(got), len(want))
		}
		for name, data := range want {
			if got[name] != data {
				t.Errorf("tarball's %s differs from the file", name)
			}
		}
	})
}

// writeAgent gives c1 the agent's DaemonSet and a pod of it that the API
// server believes running on gw-c1, and a Gateway as the agent writes it.
func writeAgent(t *testing.T, srv *kubelocal.Server) {
	ctx := t.Context()
	kc, err := srv.Client()
	if err != nil {
		t.Fatal(err)
	}
	ns := api.AgentNamespace
	labels := map[string]string{"app.kubernetes.io/name": "snorkel-agent"}
	spec := corev1.PodSpec{ServiceAccountName: api.AgentServiceAccount, Containers: []corev1.Container{{Name: "agent", Image: "ghcr.io/snorkel-net/snorkel:v0.9.0", Args: []string{"agent", "--metrics-address=:9898"}}}}
	if _, err := kc.AppsV1().DaemonSets(ns).Create(ctx, &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "snorkel-agent"},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: spec},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	spec.NodeName = "gw-c1"
	pod, err := kc.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: agentPod, Labels: labels}, Spec: spec}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "172.18.0.5", HostIP: "172.18.0.5"}
	if _, err := kc.CoreV1().Pods(ns).UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := kc.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "gw-c1"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	u, err := submv1.ToUnstructured(&submv1.Gateway{ObjectMeta: metav1.ObjectMeta{Name: "gw-c1"}}, "Gateway")
	if err != nil {
		t.Fatal(err)
	}
	dc, err := dynamic.NewForConfig(srv.Config())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dc.Resource(submv1.GatewayResource).Namespace(ns).Create(ctx, u, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func listFiles(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// secretData is the data of the Secret in the YAML file at path.
func secretData(t *testing.T, path string) map[string]string {
	t.Helper()
	var s struct {
		Kind string            `json:"kind"`
		Data map[string]string `json:"data"`
	}
	if err := yaml.Unmarshal([]byte(readFile(t, path)), &s); err != nil {
		t.Fatal(err)
	}
	if s.Kind != "Secret" {
		t.Fatalf("%s is a %q, not a Secret", path, s.Kind)
	}
	return s.Data
}

// untar reads the regular files of a gzipped tar file.
func untar(t *testing.T, path string) map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	files := map[string]string{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files[h.Name] = string(data)
	}
}
