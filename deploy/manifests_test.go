package deploy

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os/exec"
	"path"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/yaml"
)

// TestEveryManifestFileIsListed checks that each directory under
// kustomize/ is a base listed in Kustomizations, and that every file in it
// is its kustomization or listed by it, so `kubectl apply -k` and the
// binary install the same files.
func TestEveryManifestFileIsListed(t *testing.T) {
	files, err := ManifestFiles()
	if err != nil {
		t.Fatal(err)
	}
	byDir := map[string][]string{}
	for _, f := range files {
		byDir[path.Dir(f)] = append(byDir[path.Dir(f)], path.Base(f))
	}
	var dirs []string
	for d := range byDir {
		dirs = append(dirs, strings.TrimPrefix(d, "kustomize/"))
	}
	slices.Sort(dirs)
	if want := slices.Sorted(slices.Values(Kustomizations)); !slices.Equal(dirs, want) {
		t.Errorf("directories under kustomize/ %v, want Kustomizations %v", dirs, want)
	}
	for d, names := range byDir {
		k, err := ReadKustomization(strings.TrimPrefix(d, "kustomize/"))
		if err != nil {
			t.Error(err)
			continue
		}
		for _, n := range names {
			if n != kustomizationFile && !slices.Contains(k.Resources, n) {
				t.Errorf("%s/%s is not listed in %s/%s", d, n, d, kustomizationFile)
			}
		}
		for _, r := range k.Resources {
			if _, err := fs.Stat(kustomizeFiles, path.Clean(path.Join(d, r))); err != nil {
				t.Errorf("%s/%s lists %s: %v", d, kustomizationFile, r, err)
			}
		}
	}
}

// TestManifestsDecodeStrictly reads every base and decodes each object
// into its Kubernetes type, refusing unknown fields, so a misspelt field
// fails here.
func TestManifestsDecodeStrictly(t *testing.T) {
	for _, base := range Kustomizations {
		objs, err := Manifests(base, ManifestOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(objs) == 0 {
			t.Errorf("base %s has no objects", base)
		}
		seen := map[string]bool{}
		for _, u := range objs {
			id := u.GetKind() + " " + objectName(u)
			if seen[id] {
				t.Errorf("base %s has %s twice", base, id)
			}
			seen[id] = true
			typed, err := scheme.Scheme.New(u.GroupVersionKind())
			if err != nil {
				t.Errorf("base %s: %s: %v", base, id, err)
				continue
			}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(u.Object, typed, true); err != nil {
				t.Errorf("base %s: %s: %v", base, id, err)
			}
		}
	}
}

func find(t *testing.T, base, kind, name string) *unstructured.Unstructured {
	t.Helper()
	objs, err := Manifests(base, ManifestOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range objs {
		if u.GetKind() == kind && u.GetName() == name {
			return u
		}
	}
	t.Fatalf("base %s has no %s %s", base, kind, name)
	return nil
}

func typed[T any](t *testing.T, u *unstructured.Unstructured) *T {
	t.Helper()
	out := new(T)
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, out); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestAgentDaemonSet checks the agent's privileges: the host network and
// NET_ADMIN for the TUN device on the gateway nodes, and nothing more.
func TestAgentDaemonSet(t *testing.T) {
	ds := typed[appsv1.DaemonSet](t, find(t, "agent", "DaemonSet", "snorkel-agent"))
	spec := ds.Spec.Template.Spec
	if spec.NodeSelector["submariner.io/gateway"] != "true" || len(spec.NodeSelector) != 1 {
		t.Errorf("nodeSelector %v, want submariner.io/gateway=true only", spec.NodeSelector)
	}
	if !spec.HostNetwork || spec.HostPID || spec.HostIPC {
		t.Errorf("hostNetwork %v hostPID %v hostIPC %v, want the host network only", spec.HostNetwork, spec.HostPID, spec.HostIPC)
	}
	if spec.ServiceAccountName != "snorkel-agent" {
		t.Errorf("serviceAccountName %q", spec.ServiceAccountName)
	}
	if len(spec.Containers) != 1 {
		t.Fatalf("%d containers", len(spec.Containers))
	}
	c := spec.Containers[0]
	sc := c.SecurityContext
	if sc == nil || sc.Privileged == nil || *sc.Privileged || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Errorf("securityContext %+v: want privileged and privilege escalation off", sc)
	}
	if sc != nil && (sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Add, []corev1.Capability{"NET_ADMIN"}) || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"})) {
		t.Errorf("capabilities %+v, want all dropped but NET_ADMIN", sc.Capabilities)
	}
	if sc != nil && (sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem) {
		t.Error("the root file system is writable")
	}
	hostPaths := map[string]*corev1.HostPathVolumeSource{}
	memory := map[string]bool{}
	for _, v := range spec.Volumes {
		switch {
		case v.HostPath != nil:
			hostPaths[v.Name] = v.HostPath
		case v.EmptyDir != nil && v.EmptyDir.Medium == corev1.StorageMediumMemory:
			memory[v.Name] = true
		default:
			t.Errorf("volume %s is neither a host path nor memory", v.Name)
		}
	}
	mounts := map[string]string{}
	for _, m := range c.VolumeMounts {
		mounts[m.MountPath] = m.Name
		if hp := hostPaths[m.Name]; !memory[m.Name] && (hp == nil || hp.Path != m.MountPath) {
			t.Errorf("mount %s is not the node's %s", m.MountPath, m.MountPath)
		}
		if m.MountPath == "/var/lib/snorkel" && m.SubPathExpr != "$(NODE_NAME)" {
			t.Errorf("/var/lib/snorkel mounts subPathExpr %q, want the node's own directory $(NODE_NAME)", m.SubPathExpr)
		}
	}
	// wireguard-go makes its UAPI socket there, and the root is read-only.
	if !memory[mounts["/var/run/wireguard"]] {
		t.Errorf("/var/run/wireguard is not a memory volume")
	}
	if hp := hostPaths[mounts["/dev/net/tun"]]; hp == nil || hp.Type == nil || *hp.Type != corev1.HostPathCharDev {
		t.Errorf("/dev/net/tun is not mounted from the node as a character device")
	}
	if hp := hostPaths[mounts["/var/lib/snorkel"]]; hp == nil || hp.Type == nil || *hp.Type != corev1.HostPathDirectoryOrCreate {
		t.Errorf("/var/lib/snorkel is not kept on the node")
	}
	if len(hostPaths) != 2 {
		t.Errorf("%d host paths, want /dev/net/tun and /var/lib/snorkel only", len(hostPaths))
	}
	var nodeName bool
	for _, e := range c.Env {
		if e.Name == "NODE_NAME" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "spec.nodeName" {
			nodeName = true
		}
	}
	if !nodeName {
		t.Error("NODE_NAME does not come from spec.nodeName")
	}
	if c.Args[0] != "agent" || !slices.Contains(c.Args, "--metrics-address=:9898") || !slices.Contains(c.Args, "--wireguard-key-file=/var/lib/snorkel/wireguard.key") {
		t.Errorf("args %v", c.Args)
	}
	if c.Image != DefaultImage {
		t.Errorf("image %s, want %s", c.Image, DefaultImage)
	}
}

// TestRouteAgentDaemonSet checks the route agent: on every node, tainted
// ones too, in the host network with NET_ADMIN and nothing more, under
// Submariner's names.
func TestRouteAgentDaemonSet(t *testing.T) {
	ds := typed[appsv1.DaemonSet](t, find(t, "routeagent", "DaemonSet", "submariner-routeagent"))
	if ds.Namespace != "submariner-operator" || ds.Spec.Selector.MatchLabels["app"] != "submariner-routeagent" {
		t.Errorf("namespace %q selector %v, want submariner-operator and Submariner's app=submariner-routeagent", ds.Namespace, ds.Spec.Selector.MatchLabels)
	}
	for k, v := range map[string]string{"app": "submariner-routeagent", "app.kubernetes.io/name": "snorkel-routeagent",
		"app.kubernetes.io/component": "routeagent", "app.kubernetes.io/part-of": "snorkel"} {
		if ds.Labels[k] != v || ds.Spec.Template.Labels[k] != v {
			t.Errorf("label %s is %q on the DaemonSet and %q on its pods, want %q", k, ds.Labels[k], ds.Spec.Template.Labels[k], v)
		}
	}
	spec := ds.Spec.Template.Spec
	if len(spec.NodeSelector) != 0 || len(spec.Tolerations) != 1 || spec.Tolerations[0].Operator != corev1.TolerationOpExists || spec.Tolerations[0].Key != "" {
		t.Errorf("nodeSelector %v tolerations %+v, want every node, whatever its taints", spec.NodeSelector, spec.Tolerations)
	}
	if !spec.HostNetwork || spec.HostPID || spec.HostIPC || len(spec.Volumes) != 0 {
		t.Errorf("hostNetwork %v hostPID %v hostIPC %v volumes %v, want the host network only", spec.HostNetwork, spec.HostPID, spec.HostIPC, spec.Volumes)
	}
	if spec.ServiceAccountName != "submariner-routeagent" {
		t.Errorf("serviceAccountName %q", spec.ServiceAccountName)
	}
	if len(spec.Containers) != 1 {
		t.Fatalf("%d containers", len(spec.Containers))
	}
	c := spec.Containers[0]
	sc := c.SecurityContext
	if sc == nil || sc.Privileged == nil || *sc.Privileged || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || sc.RunAsUser == nil || *sc.RunAsUser != 0 {
		t.Errorf("securityContext %+v: want root, unprivileged, without privilege escalation, on a read-only root", sc)
	}
	if sc != nil && (sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Add, []corev1.Capability{"NET_ADMIN"}) || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"})) {
		t.Errorf("capabilities %+v, want all dropped but NET_ADMIN", sc.Capabilities)
	}
	if !slices.Equal(c.Args, []string{"route-agent"}) || c.Image != DefaultImage {
		t.Errorf("args %v image %s, want route-agent and %s", c.Args, c.Image, DefaultImage)
	}
	if len(c.Env) != 2 || c.Env[0].Name != "NODE_NAME" || c.Env[0].ValueFrom == nil || c.Env[0].ValueFrom.FieldRef == nil || c.Env[0].ValueFrom.FieldRef.FieldPath != "spec.nodeName" {
		t.Errorf("env %+v, want NODE_NAME from spec.nodeName, then the clusterset IP range", c.Env)
	}
	// An older join's Secret lacks the key: optional, so the pods start
	// and route no clusterset IP range.
	if len(c.Env) == 2 {
		e := c.Env[1]
		if e.Name != "CLUSTERSET_IP_CIDR_RANGE" || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil || e.ValueFrom.SecretKeyRef.Name != "snorkel-agent" ||
			e.ValueFrom.SecretKeyRef.Key != "clustersetIPCIDRRange" || e.ValueFrom.SecretKeyRef.Optional == nil || !*e.ValueFrom.SecretKeyRef.Optional {
			t.Errorf("env %+v, want CLUSTERSET_IP_CIDR_RANGE from the optional key clustersetIPCIDRRange of Secret snorkel-agent", e)
		}
	}
}

// TestDNSDeployment checks dnsd: two unprivileged replicas behind a
// ClusterIP Service on 53 UDP and TCP named like Lighthouse's.
func TestDNSDeployment(t *testing.T) {
	d := typed[appsv1.Deployment](t, find(t, "dnsd", "Deployment", "submariner-lighthouse-coredns"))
	if d.Spec.Replicas == nil || *d.Spec.Replicas != 2 {
		t.Errorf("replicas %v, want 2", d.Spec.Replicas)
	}
	spec := d.Spec.Template.Spec
	if spec.HostNetwork || spec.SecurityContext == nil || spec.SecurityContext.RunAsNonRoot == nil || !*spec.SecurityContext.RunAsNonRoot {
		t.Errorf("pod security %+v, want non-root off the host network", spec.SecurityContext)
	}
	c := spec.Containers[0]
	if c.SecurityContext == nil || c.SecurityContext.Capabilities == nil || len(c.SecurityContext.Capabilities.Add) != 0 ||
		!slices.Equal(c.SecurityContext.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Errorf("dnsd's capabilities %+v, want none", c.SecurityContext)
	}
	for _, a := range []string{"dnsd", "--listen=:53", "--metrics-address=:9153", "--cluster-id=$(CLUSTER_ID)", "--globalnet=$(GLOBALNET)"} {
		if !slices.Contains(c.Args, a) {
			t.Errorf("args %v lack %s", c.Args, a)
		}
	}
	fromSecret := map[string]string{}
	for _, e := range c.Env {
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil && e.ValueFrom.SecretKeyRef.Name == "snorkel-agent" &&
			(e.ValueFrom.SecretKeyRef.Optional == nil || !*e.ValueFrom.SecretKeyRef.Optional) {
			fromSecret[e.Name] = e.ValueFrom.SecretKeyRef.Key
		}
	}
	if fromSecret["CLUSTER_ID"] != "clusterID" || fromSecret["GLOBALNET"] != "globalnet" {
		t.Errorf("from the agent Secret: %v, want CLUSTER_ID from clusterID and GLOBALNET from globalnet", fromSecret)
	}
	if c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet == nil || c.ReadinessProbe.HTTPGet.Path != "/readyz" {
		t.Errorf("readiness probe %+v, want dnsd's /readyz", c.ReadinessProbe)
	}
	svc := typed[corev1.Service](t, find(t, "dnsd", "Service", "submariner-lighthouse-coredns"))
	var ports []string
	for _, p := range svc.Spec.Ports {
		ports = append(ports, fmt.Sprintf("%s/%s/%d", p.Protocol, p.TargetPort.String(), p.Port))
	}
	if !slices.Equal(ports, []string{"UDP/dns/53", "TCP/dns-tcp/53"}) {
		t.Errorf("Service ports %v, want 53 UDP and TCP", ports)
	}
	if svc.Spec.Type != corev1.ServiceTypeClusterIP || svc.Spec.Selector["app"] != d.Spec.Template.Labels["app"] {
		t.Errorf("Service type %s selector %v", svc.Spec.Type, svc.Spec.Selector)
	}
}

func TestImages(t *testing.T) {
	for _, tc := range []struct {
		ref  string
		ki   KustomizeImage
		want string
	}{
		{"ghcr.io/snorkel-net/snorkel:latest", KustomizeImage{NewTag: "v1"}, "ghcr.io/snorkel-net/snorkel:v1"},
		{"ghcr.io/snorkel-net/snorkel:latest", KustomizeImage{NewName: "localhost:5000/snorkel"}, "localhost:5000/snorkel:latest"},
		{"ghcr.io/snorkel-net/snorkel:latest", KustomizeImage{NewName: "localhost:5000/snorkel:dev"}, "localhost:5000/snorkel:dev"},
		{"ghcr.io/snorkel-net/snorkel", KustomizeImage{NewTag: "v2"}, "ghcr.io/snorkel-net/snorkel:v2"},
		{"ghcr.io/snorkel-net/snorkel@sha256:abc", KustomizeImage{NewName: "r/s"}, "r/s@sha256:abc"},
	} {
		if got := replaceImage(tc.ref, tc.ki); got != tc.want {
			t.Errorf("replaceImage(%s, %+v) = %s, want %s", tc.ref, tc.ki, got, tc.want)
		}
	}
	if got := imageRepo("localhost:5000/snorkel:dev"); got != "localhost:5000/snorkel" {
		t.Errorf("imageRepo = %s", got)
	}
	objs, err := Manifests("member", ManifestOptions{Image: "localhost:5000/snorkel:dev"})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, u := range objs {
		cs, _, _ := unstructured.NestedSlice(u.Object, "spec", "template", "spec", "containers")
		for _, c := range cs {
			n++
			if img := c.(map[string]any)["image"]; img != "localhost:5000/snorkel:dev" {
				t.Errorf("%s %s runs %v", u.GetKind(), u.GetName(), img)
			}
		}
	}
	if n != 3 {
		t.Errorf("%d containers, want the agent's, the route agent's and dnsd's", n)
	}
	if err := ValidateImage(""); err == nil {
		t.Error("an empty --image is accepted")
	}
	for _, bad := range []string{"has space", "-flag", "repo:", "repo/"} {
		if _, err := Manifests("member", ManifestOptions{Image: bad}); err == nil || !strings.Contains(err.Error(), "--image") {
			t.Errorf("image %q: %v, want it refused naming --image", bad, err)
		}
	}
}

func TestParseKustomizationRefusesWhatTheBinaryWouldNotApply(t *testing.T) {
	for _, tc := range []struct{ name, doc, want string }{
		{"a transformer", "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nnamePrefix: x-\n", "namePrefix"},
		{"another kind", "apiVersion: kustomize.config.k8s.io/v1alpha1\nkind: Component\n", "want kustomize.config.k8s.io/v1beta1 Kustomization"},
		{"an empty image entry", "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nimages:\n  - name: x\n", "newName or newTag"},
	} {
		if _, err := parseKustomization("test", []byte(tc.doc)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error naming %q", tc.name, err, tc.want)
		}
	}
}

// TestKubectlKustomizeAgrees builds each base with kubectl's kustomize,
// where kubectl is installed, and compares its objects with the binary's.
func TestKubectlKustomizeAgrees(t *testing.T) {
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Skip("kubectl is not installed; the other tests check the bases without it")
	}
	for _, base := range Kustomizations {
		out, err := exec.Command(kubectl, "kustomize", path.Join("kustomize", base)).Output()
		if err != nil {
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				t.Fatalf("kubectl kustomize %s: %v\n%s", base, err, ee.Stderr)
			}
			t.Fatal(err)
		}
		var theirs []string
		r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(out)))
		for {
			doc, err := r.Read()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			var m map[string]any
			if err := yaml.Unmarshal(doc, &m); err != nil {
				t.Fatal(err)
			}
			b, _ := json.Marshal(m)
			theirs = append(theirs, string(b))
		}
		objs, err := Manifests(base, ManifestOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var ours []string
		for _, u := range objs {
			b, _ := json.Marshal(u.Object)
			ours = append(ours, string(b))
		}
		slices.Sort(theirs)
		slices.Sort(ours)
		if !slices.Equal(theirs, ours) {
			t.Errorf("base %s: kubectl kustomize builds\n%s\nthe binary reads\n%s", base, strings.Join(theirs, "\n"), strings.Join(ours, "\n"))
		}
	}
}
