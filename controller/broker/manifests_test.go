package broker

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/snorkel-net/snorkel/controller/api"
	"github.com/snorkel-net/snorkel/deploy"
	"github.com/snorkel-net/snorkel/transport"
)

var update = flag.Bool("update", false, "rewrite the manifests' access files from rbac.go")

// accessFileHeader starts every manifest file written from rbac.go.
const accessFileHeader = "# Written from controller/broker/rbac.go, which `snorkel join` and\n" +
	"# `snorkel deploy-broker` apply; change the definitions there and run\n" +
	"#   go test ./controller/broker -run TestManifestAccessFiles -update\n"

// accessFiles are the manifest files (under deploy/kustomize) that hold
// the access objects, with their objects.
func accessFiles() map[string][]any {
	broker, agent := brokerAccessObjects(api.DefaultBrokerNamespace), agentAccessObjects()
	return map[string][]any{
		"broker/namespace.yaml": broker[:1],
		"broker/rbac.yaml":      broker[1:],
		"agent/namespace.yaml":  agent[:1],
		"agent/rbac.yaml":       agent[1:],
		"dnsd/rbac.yaml":        dnsdAccessObjects(),
		"routeagent/rbac.yaml":  routeAgentAccessObjects(),
	}
}

func renderAccessFile(t *testing.T, objs []any) []byte {
	t.Helper()
	var b bytes.Buffer
	b.WriteString(accessFileHeader)
	for _, o := range objs {
		y, err := yaml.Marshal(o)
		if err != nil {
			t.Fatal(err)
		}
		b.WriteString("---\n")
		b.Write(y)
	}
	return b.Bytes()
}

// TestManifestAccessFiles checks that the manifests' namespaces,
// ServiceAccounts and RBAC are exactly what Join and Deploy apply.
func TestManifestAccessFiles(t *testing.T) {
	for name, objs := range accessFiles() {
		want := renderAccessFile(t, objs)
		if *update {
			if err := os.WriteFile(filepath.Join("..", "..", "deploy", "kustomize", name), want, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		have, err := deploy.ManifestFile("kustomize/" + name)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(have, want) {
			t.Errorf("deploy/kustomize/%s differs from rbac.go's definitions; run go test ./controller/broker -run TestManifestAccessFiles -update\nwant:\n%s", name, want)
		}
	}
}

// TestManifestsHoldNoOtherAccess checks that the manifests grant nothing
// Join and Deploy do not: their access objects are those of rbac.go, in
// the same order, and nothing else.
func TestManifestsHoldNoOtherAccess(t *testing.T) {
	for _, tc := range []struct {
		base string
		want []any
	}{
		{"broker", brokerAccessObjects(api.DefaultBrokerNamespace)},
		{MemberManifests, memberAccessObjects()},
	} {
		objs, err := deploy.Manifests(tc.base, deploy.ManifestOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var have []string
		for _, u := range objs {
			if accessKinds[u.GetKind()] {
				have = append(have, canonicalJSON(t, u.Object))
			}
		}
		want, err := unstructuredObjects(tc.want)
		if err != nil {
			t.Fatal(err)
		}
		var wantJSON []string
		for _, u := range want {
			wantJSON = append(wantJSON, canonicalJSON(t, u.Object))
		}
		if strings.Join(have, "\n") != strings.Join(wantJSON, "\n") {
			t.Errorf("base %s: access objects\n%s\nwant rbac.go's\n%s", tc.base, strings.Join(have, "\n"), strings.Join(wantJSON, "\n"))
		}
	}
}

func canonicalJSON(t *testing.T, v map[string]any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestMemberWorkloads checks what DeployMember applies: the workloads and
// their Services, with the image asked for, and no access object.
func TestMemberWorkloads(t *testing.T) {
	objs, err := memberWorkloads("registry.example/snorkel:v9")
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, u := range objs {
		kinds = append(kinds, u.GetKind()+" "+u.GetName())
		if u.GetNamespace() != api.AgentNamespace {
			t.Errorf("%s %s in namespace %q, want %s", u.GetKind(), u.GetName(), u.GetNamespace(), api.AgentNamespace)
		}
		for _, img := range containerImages(t, u) {
			if img != "registry.example/snorkel:v9" {
				t.Errorf("%s %s runs %s, want the --image", u.GetKind(), u.GetName(), img)
			}
		}
	}
	want := "DaemonSet " + AgentDaemonSet + ", Service snorkel-agent-metrics, DaemonSet " + RouteAgentDaemonSet + ", Deployment " + DNSDeployment +
		", Service " + DNSService + ", Service submariner-lighthouse-coredns-metrics"
	if strings.Join(kinds, ", ") != want {
		t.Errorf("workloads %s, want %s", strings.Join(kinds, ", "), want)
	}
}

func containerImages(t *testing.T, u *unstructured.Unstructured) []string {
	t.Helper()
	cs, _, err := unstructured.NestedSlice(u.Object, "spec", "template", "spec", "containers")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, c := range cs {
		out = append(out, c.(map[string]any)["image"].(string))
	}
	return out
}

// TestAgentMemoryRequestFollowsTheCableDriver: the agent's memory request is
// set from the benchmark's peak for the cluster's transport.
func TestAgentMemoryRequestFollowsTheCableDriver(t *testing.T) {
	for driver, want := range map[string]string{
		transport.ESP:       agentMemoryRequest,
		transport.VXLAN:     agentMemoryRequest,
		transport.WireGuard: agentMemoryRequestWireGuard,
	} {
		objs, err := memberWorkloads(deploy.DefaultImage)
		if err != nil {
			t.Fatal(err)
		}
		if err := setAgentMemoryRequest(objs, driver); err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, u := range objs {
			cs, _, _ := unstructured.NestedSlice(u.Object, "spec", "template", "spec", "containers")
			for _, c := range cs {
				m, _, _ := unstructured.NestedString(c.(map[string]any), "resources", "requests", "memory")
				if u.GetName() == AgentDaemonSet {
					got = append(got, m)
				} else if m == want && want != agentMemoryRequest {
					t.Errorf("%s: %s %s also requests %s", driver, u.GetKind(), u.GetName(), m)
				}
			}
		}
		if len(got) != 1 || got[0] != want {
			t.Errorf("%s: the agent requests %v, want [%s]", driver, got, want)
		}
	}
	if err := setAgentMemoryRequest(nil, transport.ESP); err == nil {
		t.Error("no error without the agent DaemonSet")
	}
}
