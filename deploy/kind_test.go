package deploy

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
	kindv1alpha4 "sigs.k8s.io/kind/pkg/apis/config/v1alpha4"
	sigsyaml "sigs.k8s.io/yaml"
)

// tutorialClusters are the Submariner tutorial's clusters: name, Pod CIDR,
// Service CIDR, and whether the cluster has a gateway node.
var tutorialClusters = []struct {
	name, pods, services string
	member               bool
}{
	{"broker", "10.7.0.0/16", "10.77.0.0/16", false},
	{"c1", "10.8.0.0/16", "10.88.0.0/16", true},
	{"c2", "10.9.0.0/16", "10.99.0.0/16", true},
	{"g1", "10.7.0.0/16", "10.77.0.0/16", true},
	{"g2", "10.7.0.0/16", "10.77.0.0/16", true},
}

// decodeKindConfig decodes a Kind configuration as kind itself does:
// YAML field names, unknown fields refused.
func decodeKindConfig(b []byte) (*kindv1alpha4.Cluster, error) {
	d := yaml.NewDecoder(bytes.NewReader(b))
	d.KnownFields(true)
	c := &kindv1alpha4.Cluster{}
	return c, d.Decode(c)
}

func TestKindConfigsAreTheTutorials(t *testing.T) {
	for _, want := range tutorialClusters {
		b, err := os.ReadFile(filepath.Join("kind", want.name+".yaml"))
		if err != nil {
			t.Fatal(err)
		}
		c, err := decodeKindConfig(b)
		if err != nil {
			t.Errorf("kind/%s.yaml: %v", want.name, err)
			continue
		}
		if c.APIVersion != "kind.x-k8s.io/v1alpha4" || c.Kind != "Cluster" || c.Name != want.name {
			t.Errorf("kind/%s.yaml: %s %s named %q", want.name, c.APIVersion, c.Kind, c.Name)
		}
		kindv1alpha4.SetDefaultsCluster(c)
		if c.Networking.PodSubnet != want.pods || c.Networking.ServiceSubnet != want.services || c.Networking.IPFamily != kindv1alpha4.IPv4Family {
			t.Errorf("kind/%s.yaml: pods %s services %s (%s), want %s and %s", want.name, c.Networking.PodSubnet, c.Networking.ServiceSubnet,
				c.Networking.IPFamily, want.pods, want.services)
		}
		var gateways, controlPlanes int
		for _, n := range c.Nodes {
			if n.Role == kindv1alpha4.ControlPlaneRole {
				controlPlanes++
			}
			if n.Labels["submariner.io/gateway"] == "true" {
				gateways++
				if n.Role != kindv1alpha4.WorkerRole {
					t.Errorf("kind/%s.yaml: the gateway is a %s, want the worker (the lab routes through %s-worker)", want.name, n.Role, want.name)
				}
			}
		}
		if controlPlanes != 1 || (want.member && gateways != 1) || (!want.member && gateways != 0) {
			t.Errorf("kind/%s.yaml: %d control planes and %d gateway nodes", want.name, controlPlanes, gateways)
		}
	}
}

func TestKindConfigTyposFail(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("kind", "c1.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	typo := bytes.Replace(b, []byte("podSubnet"), []byte("podSubnett"), 1)
	if _, err := decodeKindConfig(typo); err == nil || !strings.Contains(err.Error(), "podSubnett") {
		t.Errorf("a misspelt field decodes: %v", err)
	}
}

// TestLabScriptKnowsTheConfigs checks that lab.sh's tables of CIDRs agree
// with the Kind configurations.
func TestLabScriptKnowsTheConfigs(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("kind", "lab.sh"))
	if err != nil {
		t.Fatal(err)
	}
	script := string(b)
	for _, c := range tutorialClusters {
		if !c.member {
			continue
		}
		for table, cidr := range map[string]string{"POD_CIDR": c.pods, "SERVICE_CIDR": c.services} {
			line := regexp.MustCompile(`(?m)^declare -A ` + table + `=\((.*)\)$`).FindStringSubmatch(script)
			if line == nil || !strings.Contains(line[1], "["+c.name+"]="+cidr) {
				t.Errorf("lab.sh's %s lacks [%s]=%s", table, c.name, cidr)
			}
		}
	}
}

// TestLabManifests decodes the lab's workloads, as lab.sh fills them in,
// into their Kubernetes types, refusing unknown fields.
func TestLabManifests(t *testing.T) {
	fill := strings.NewReplacer("@CLUSTER@", "c2", "@IMAGE@", DefaultImage, "@CLIENT_IMAGE@", "nicolaka/netshoot:v0.13")
	for _, name := range []string{"whereami.yaml", "client.yaml"} {
		b, err := os.ReadFile(filepath.Join("kind", name))
		if err != nil {
			t.Fatal(err)
		}
		docs := utilyaml.NewYAMLReader(bufio.NewReader(strings.NewReader(fill.Replace(string(b)))))
		n := 0
		for {
			doc, err := docs.Read()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			j, err := sigsyaml.YAMLToJSON(doc)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			u := &unstructured.Unstructured{}
			if err := u.UnmarshalJSON(j); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			typed, err := scheme.Scheme.New(u.GroupVersionKind())
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(u.Object, typed, true); err != nil {
				t.Errorf("%s: %s %s: %v", name, u.GetKind(), u.GetName(), err)
			}
			if strings.Contains(string(doc), "@") {
				t.Errorf("%s: %s %s keeps a placeholder", name, u.GetKind(), u.GetName())
			}
			n++
		}
		if n == 0 {
			t.Errorf("%s has no objects", name)
		}
	}
}

// pathWith makes a directory holding links to the named commands (and a
// fake docker, if fakeDocker is set) for a PATH that lacks everything else.
func pathWith(t *testing.T, fakeDocker string, commands ...string) string {
	t.Helper()
	dir := t.TempDir()
	for _, c := range commands {
		p, err := exec.LookPath(c)
		if err != nil {
			t.Fatalf("%s is needed to run the script under test: %v", c, err)
		}
		if err := os.Symlink(p, filepath.Join(dir, c)); err != nil {
			t.Fatal(err)
		}
	}
	if fakeDocker != "" {
		if err := os.WriteFile(filepath.Join(dir, "docker"), []byte(fakeDocker), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// runScript runs a script with bash and only PATH in its environment.
func runScript(t *testing.T, path string, script string, args ...string) (string, int) {
	t.Helper()
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("bash is not installed")
	}
	cmd := exec.Command(bash, append([]string{script}, args...)...)
	cmd.Env = []string{"PATH=" + path}
	out, err := cmd.CombinedOutput()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return string(out), code
}

const failingDocker = "#!/bin/sh\necho 'Cannot connect to the Docker daemon at unix:///var/run/docker.sock.' >&2\nexit 1\n"

func TestLabScriptSaysWhatIsMissing(t *testing.T) {
	for _, tc := range []struct {
		name       string
		fakeDocker string
		want       []string
	}{
		{"no docker", "", []string{"docker: not installed", "kind: not installed", "kubectl: not installed", "make lab runs the same demo"}},
		{"docker without its daemon", failingDocker, []string{"docker: installed, but its daemon is not reachable", "kind: not installed"}},
	} {
		out, code := runScript(t, pathWith(t, tc.fakeDocker, "dirname"), filepath.Join("kind", "lab.sh"), "run")
		if code != 1 {
			t.Errorf("%s: exit code %d, want 1\n%s", tc.name, code, out)
		}
		for _, w := range tc.want {
			if !strings.Contains(out, w) {
				t.Errorf("%s: output lacks %q:\n%s", tc.name, w, out)
			}
		}
	}
}

func TestImageScriptSaysWhatIsMissing(t *testing.T) {
	for _, tc := range []struct {
		name       string
		fakeDocker string
		want       []string
	}{
		{"no engine", "", []string{"found none that works", "docker: not installed", "podman: not installed", "go: not installed", "deploy/build-static.sh"}},
		{"docker without its daemon", failingDocker, []string{"docker: installed, but it cannot reach its engine: Cannot connect to the Docker daemon"}},
	} {
		out, code := runScript(t, pathWith(t, tc.fakeDocker, "dirname"), "image.sh")
		if code != 1 {
			t.Errorf("%s: exit code %d, want 1\n%s", tc.name, code, out)
		}
		for _, w := range tc.want {
			if !strings.Contains(out, w) {
				t.Errorf("%s: output lacks %q:\n%s", tc.name, w, out)
			}
		}
	}
}

func TestScriptsAreShellcheckClean(t *testing.T) {
	sc, err := exec.LookPath("shellcheck")
	if err != nil {
		t.Skip("shellcheck is not installed (apt-get install shellcheck)")
	}
	out, err := exec.Command(sc, filepath.Join("kind", "lab.sh"), "image.sh", "build-static.sh").CombinedOutput()
	if err != nil {
		t.Errorf("shellcheck: %v\n%s", err, out)
	}
}

// Stand-ins for docker, kind, kubectl and snorkel that log their arguments
// and answer the lab's questions as a working lab would; kubectl's answer
// to g1's HTTP check is $G1_HTTP.
var labStubs = map[string]string{
	"docker": `case "$1" in inspect) echo 172.18.0.9;; esac`,
	"kind":   `case "$1 $2" in "get nodes") echo "$4-control-plane"; echo "$4-worker";; esac`,
	"kubectl": `case "$*" in
*"apply -f -"*) cat >/dev/null;;
*"get service whereami-cs"*) printf 10.99.0.10;;
*"get pods -l app=whereami"*) printf whereami-abc;;
*"get pod whereami-abc"*) printf 10.9.1.5;;
*"get pod client"*) printf 10.8.1.7;;
*"get clusters.submariner.io g2"*) printf 242.1.0.0/16;;
*kind-c1*"dig +short whereami-cs"*) echo 10.99.0.10;;
*kind-g1*"dig +short whereami-cs"*) echo 242.1.255.253;;
*"dig +short whereami-ss"*) echo 10.9.1.5;;
*kind-c1*curl*whereami-0.c2*) echo '{"pod":"whereami-0","cluster":"c2"}';;
*kind-c1*curl*10.9.1.5:8080*) echo '{"pod":"whereami-abc","cluster":"c2","client":"10.8.1.7:41000"}';;
*kind-c1*curl*) echo '{"pod":"whereami-abc","cluster":"c2"}';;
*kind-g1*curl*) echo "$G1_HTTP";;
*ping*) echo '3 packets transmitted, 3 received, 0% packet loss';;
esac`,
	"snorkel": ``,
}

// TestLabScriptFlow runs lab.sh against stand-ins: it must create the five
// clusters, deploy both brokers, join each member with its CIDRs and
// broker, route to the gateways, export the services, and pass or fail the
// demo as the answers say.
func TestLabScriptFlow(t *testing.T) {
	dir := pathWith(t, "", "dirname", "sed", "grep", "head", "tr", "mkdir", "rm", "sleep", "cat")
	for name, body := range labStubs {
		script := "#!/bin/bash\necho \"" + name + " $*\" >> \"$LOG\"\n" + body + "\nexit 0\n"
		if err := os.WriteFile(filepath.Join(dir, name), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("bash is not installed")
	}
	run := func(g1HTTP string) (string, string, int) {
		state := t.TempDir()
		log := filepath.Join(state, "log")
		cmd := exec.Command(bash, filepath.Join("kind", "lab.sh"), "run")
		cmd.Env = []string{"PATH=" + dir, "LOG=" + log, "SNORKEL=" + filepath.Join(dir, "snorkel"), "STATE=" + filepath.Join(state, "lab"),
			"CHECK_DEADLINE=1", "G1_HTTP=" + g1HTTP}
		out, err := cmd.CombinedOutput()
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		calls, err := os.ReadFile(log)
		if err != nil {
			t.Fatal(err)
		}
		return string(out), string(calls), code
	}

	out, calls, code := run(`{"pod":"whereami-abc","cluster":"g2"}`)
	if code != 0 || strings.Contains(out, "✗") || strings.Count(out, "✓") != 9 {
		t.Errorf("exit code %d, want 0 and nine passed checks:\n%s", code, out)
	}
	for _, want := range []string{
		"kind create cluster --config " + filepath.Join(mustAbs(t, "kind"), "broker.yaml"),
		"kind create cluster --config " + filepath.Join(mustAbs(t, "kind"), "g2.yaml"),
		"kind load docker-image ghcr.io/snorkel-net/snorkel:dev --name g2",
		"--context kind-broker --broker-url https://172.18.0.9:6443 --out ",
		"--namespace submariner-k8s-broker-globalnet --globalnet --globalnet-cidr-range 242.0.0.0/8",
		"--clusterid c1 --kubeconfig ",
		"--context kind-c1 --clustercidr 10.8.0.0/16 --servicecidr 10.88.0.0/16 --cable-driver wireguard --image ghcr.io/snorkel-net/snorkel:dev",
		"--context kind-g2 --clustercidr 10.7.0.0/16 --servicecidr 10.77.0.0/16",
		"--context kind-g2 -n submariner-operator rollout status daemonset/submariner-routeagent",
		"snorkel export service whereami-cs -n sample --kubeconfig ",
		"--context kind-g2\nsnorkel export service whereami-ss",
	} {
		if !strings.Contains(calls, want) {
			t.Errorf("the lab never ran %q", want)
		}
	}
	if strings.Contains(calls, "ip route") {
		t.Error("the lab routes on the nodes itself, where the route agent routes")
	}
	if regexp.MustCompile(`broker-info-globalnet.subm --clusterid c[12]|broker-info.subm --clusterid g[12]`).MatchString(calls) {
		t.Error("a member joins the other clusterset's broker")
	}

	out, _, code = run(`{"pod":"whereami-abc","cluster":"g1"}`)
	if code != 1 || !strings.Contains(out, "✗ http  whereami-cs.sample.svc.clusterset.local answers from g2") || !strings.Contains(out, "some checks failed") {
		t.Errorf("a failing check: exit code %d, want 1 and the check marked ✗:\n%s", code, out)
	}
}

func mustAbs(t *testing.T, p string) string {
	t.Helper()
	abs, err := filepath.Abs(p)
	if err != nil {
		t.Fatal(err)
	}
	return abs
}
