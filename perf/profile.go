package perf

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strconv"
	"time"

	"github.com/snorkel-net/snorkel/lab/topo"
)

// cpuProfile fetches a Go CPU profile of the given length from the pprof
// endpoint at addr inside ns.
func cpuProfile(ctx context.Context, ns *topo.NS, addr string, seconds int) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Duration(seconds+15)*time.Second)
	defer cancel()
	url := "http://" + addr + "/debug/pprof/profile?seconds=" + strconv.Itoa(seconds)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := ns.HTTPClient().Do(req)
	if err != nil {
		return nil, fmt.Errorf("perf: profile from %s in %s: %w", url, ns, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, fmt.Errorf("perf: profile from %s in %s: %w", url, ns, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("perf: profile from %s in %s: %s: %s", url, ns, resp.Status, bytes.TrimSpace(b))
	}
	return b, nil
}

// binaryVersion returns the first line a binary prints for its version
// argument, or "" if it prints nothing.
func binaryVersion(ctx context.Context, bin string, args ...string) string {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	out, _ := exec.CommandContext(ctx, bin, args...).CombinedOutput()
	line, _, _ := bytes.Cut(bytes.TrimSpace(out), []byte("\n"))
	return string(line)
}
