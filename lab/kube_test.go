package lab

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestLabKube runs `snorkel lab --kube`: every scenario with the control
// plane on real API servers, agents configuring the gateways, and the
// services exported with `snorkel export`.
func TestLabKube(t *testing.T) {
	needRoot(t)
	if os.Getenv("SNORKEL_KUBE_APISERVER") == "" {
		t.Skip("SNORKEL_KUBE_APISERVER is not set: run the tests through `make test`, which builds kube-apiserver into .cache/bin")
	}
	prefix := testPrefix("k")
	state := filepath.Join(t.TempDir(), "state")
	out, err := runSnorkel(t, 8*time.Minute, "lab", "--kube", "--state-dir", state, "--prefix", prefix)
	t.Logf("snorkel lab --kube:\n%s", out)
	if err != nil {
		t.Errorf("snorkel lab --kube failed: %v", err)
	}
	if strings.Contains(out, "✗") || !strings.Contains(out, fmt.Sprintf("all %d scenarios passed", len(RunOrder))) {
		t.Error("not every check passed")
	}
	for _, want := range []string{"snorkel agent pid", "snorkel export service web -n sample", "import  sample/web from c2 in c1", "import  sample/db from g2 in g1"} {
		if !strings.Contains(out, want) {
			t.Errorf("the output lacks %q", want)
		}
	}
	checkNoLeftovers(t, prefix, state)
}
