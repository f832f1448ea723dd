package main

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/snorkel-net/snorkel"

// allowed lists, for each data-plane layer, the project packages it may
// import (DESIGN.md: packet ← natengine ← gateway ← controller → dnsd).
var allowed = map[string][]string{
	"packet":    {},
	"natengine": {"packet"},
	"transport": {"packet", "transport"},
	"gateway":   {"packet", "natengine", "transport", "gateway"},
	"dnsd":      {"dnsd"},
}

// forbiddenPrefixes are modules the data plane must never reach, directly or
// not: it knows nothing of Kubernetes.
var forbiddenPrefixes = []string{"k8s.io/", "sigs.k8s.io/controller-runtime", "sigs.k8s.io/mcs-api"}

func TestDataPlaneImportsOnlyLowerLayersAndNoKubernetes(t *testing.T) {
	out, err := exec.Command("go", "list", "-json=ImportPath,Deps", module+"/packet/...", module+"/natengine/...",
		module+"/transport/...", module+"/gateway/...", module+"/dnsd/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	seen := 0
	for dec.More() {
		var pkg struct {
			ImportPath string
			Deps       []string
		}
		if err := dec.Decode(&pkg); err != nil {
			t.Fatal(err)
		}
		seen++
		layer := strings.SplitN(strings.TrimPrefix(pkg.ImportPath, module+"/"), "/", 2)[0]
		for _, d := range pkg.Deps {
			for _, f := range forbiddenPrefixes {
				if strings.HasPrefix(d, f) {
					t.Errorf("%s depends on %s: the data plane must not know Kubernetes", pkg.ImportPath, d)
				}
			}
			if !strings.HasPrefix(d, module+"/") {
				continue
			}
			dl := strings.SplitN(strings.TrimPrefix(d, module+"/"), "/", 2)[0]
			ok := false
			for _, a := range allowed[layer] {
				ok = ok || a == dl
			}
			if !ok {
				t.Errorf("%s imports %s: layer %s may only use %v", pkg.ImportPath, d, layer, allowed[layer])
			}
		}
	}
	if seen < 4 {
		t.Fatalf("go list reported %d packages; expected the data-plane packages", seen)
	}
}

// TestBinaryLinksNoTestingPackage keeps test helpers out of the shipped
// binary: package testing registers its flags and grows the binary, and a
// helper that reaches it (as kubelocal's did before kubetest) belongs in a
// package only tests import.
func TestBinaryLinksNoTestingPackage(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", module+"/cmd/snorkel").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 10 {
		t.Fatalf("go list reported %d dependencies of cmd/snorkel; expected its whole build", len(deps))
	}
	for _, d := range deps {
		if d == "testing" || strings.HasPrefix(d, "testing/") {
			t.Errorf("cmd/snorkel links %s: move whatever imports it into a package only tests use", d)
		}
	}
}
