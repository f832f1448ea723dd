package dnsd

import (
	"os/exec"
	"strings"
	"testing"
)

// dnsd knows nothing of Kubernetes (DESIGN.md): it imports the standard
// library, the DNS library and the Prometheus client, and nothing it
// depends on reaches client-go, the Kubernetes API types or the rest of
// Snorkel.
func TestImportsOnlyTheDNSLibraryAndPrometheus(t *testing.T) {
	const self = "github.com/snorkel-net/snorkel/dnsd"
	out, err := exec.Command("go", "list", "-f", "{{range .Imports}}{{.}}\n{{end}}", self).Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	std, err := exec.Command("go", "list", "std").Output()
	if err != nil {
		t.Fatalf("go list std: %v", err)
	}
	isStd := map[string]bool{}
	for _, p := range strings.Fields(string(std)) {
		isStd[p] = true
	}
	allowed := []string{"github.com/miekg/dns", "github.com/prometheus/client_golang/"}
	imports := strings.Fields(string(out))
	if len(imports) == 0 {
		t.Fatal("go list reported no imports")
	}
	for _, imp := range imports {
		ok := isStd[imp]
		for _, a := range allowed {
			ok = ok || imp == a || strings.HasPrefix(imp, a)
		}
		if !ok {
			t.Errorf("dnsd imports %s: only the standard library, %s may be imported", imp, strings.Join(allowed, ", "))
		}
	}

	deps, err := exec.Command("go", "list", "-deps", self).Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for _, d := range strings.Fields(string(deps)) {
		for _, bad := range []string{"k8s.io/", "sigs.k8s.io/", "github.com/snorkel-net/snorkel/"} {
			if strings.HasPrefix(d, bad) && d != self {
				t.Errorf("dnsd depends on %s: it must never reach client-go, the Kubernetes API or the controller", d)
			}
		}
	}
}
