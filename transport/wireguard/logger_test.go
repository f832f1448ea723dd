package wireguard

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/snorkel-net/snorkel/transport"
)

// The drop counters match wireguard-go's log lines by their format strings;
// if an upgrade rewords one, the counter would silently stay at zero.
func TestDropFormatsOccurInWireguardGo(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go command not found; cannot locate the wireguard-go sources")
	}
	dir, err := exec.Command(gobin, "list", "-m", "-f", "{{.Dir}}", "golang.zx2c4.com/wireguard").Output()
	if err != nil {
		t.Skipf("go list cannot locate wireguard-go: %v", err)
	}
	files, err := filepath.Glob(filepath.Join(strings.TrimSpace(string(dir)), "device", "*.go"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no wireguard-go device sources found: %v", err)
	}
	var src strings.Builder
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		src.Write(b)
	}
	for _, format := range []string{
		fmtSpoofedV4, fmtSpoofedV6, fmtBadIPVersionRx, fmtBadIPVersionTx,
		fmtInvalidMAC1, fmtInvalidInitiation, fmtInvalidResponse,
		fmtHandshakeReplay, fmtHandshakeFlood, fmtInvalidCookie,
		fmtGotInitiation, fmtGotResponse,
	} {
		if !strings.Contains(src.String(), strconv.Quote(format)) {
			t.Errorf("wireguard-go no longer logs %q; its drops are not counted", format)
		}
	}
}

func TestVerbosefCountsWithoutAllocating(t *testing.T) {
	s := &logSink{drops: newDropCounters(1)}
	args := []any{"not a peer"}
	allocs := testing.AllocsPerRun(1000, func() {
		s.verbosef(fmtSpoofedV4, args...)
	})
	if allocs != 0 {
		t.Errorf("counting a drop allocates %v times", allocs)
	}
	if c := dropCount(s.drops.snapshot(), transport.PeerAny, ReasonSpoofedSource); c != 1001 {
		t.Errorf("counted %d spoofed_source drops, want 1001", c)
	}
}
