package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/snorkel-net/snorkel/lab"
	"github.com/snorkel-net/snorkel/lab/topo"
)

// getText GETs a path of the gateway's metrics listener.
func getText(ctx context.Context, gw *topo.NS, path string) (string, error) {
	return get(ctx, gw, lab.MetricsAddress, path)
}

// getJSON GETs a path of the gateway's debug listener (/status, /flows)
// into v.
func getJSON(ctx context.Context, gw *topo.NS, path string, v any) error {
	text, err := get(ctx, gw, lab.DebugAddress, path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal([]byte(text), v); err != nil {
		return fmt.Errorf("GET %s: %w", path, err)
	}
	return nil
}

// get GETs a path of the gateway listener at addr, which is bound to
// loopback inside the gateway node's namespace. The bound only stops a
// hung gateway from hanging the test.
func get(ctx context.Context, gw *topo.NS, addr, path string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, settle)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+path, nil)
	if err != nil {
		return "", err
	}
	resp, err := gw.HTTPClient().Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: %s: %s", path, resp.Status, strings.TrimSpace(string(b)))
	}
	return string(b), nil
}

// sample returns the value of the sample of metric name whose labels
// include labels, from the Prometheus text format; zero if there is none,
// as the gateway exports a drop counter only once it is non-zero. More than
// one match is an error: the labels were not specific enough.
func sample(text, name string, labels map[string]string) (float64, error) {
	var (
		found bool
		v     float64
	)
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		sp := strings.LastIndexByte(line, ' ')
		if sp < 0 {
			return 0, fmt.Errorf("metrics line %q has no value", line)
		}
		series, value := line[:sp], line[sp+1:]
		got, lbls := series, map[string]string{}
		if i := strings.IndexByte(series, '{'); i >= 0 {
			got = series[:i]
			var err error
			if lbls, err = parseLabels(strings.TrimSuffix(series[i+1:], "}")); err != nil {
				return 0, fmt.Errorf("metrics line %q: %w", line, err)
			}
		}
		if got != name || !hasLabels(lbls, labels) {
			continue
		}
		if found {
			return 0, fmt.Errorf("more than one sample of %s matches %v", name, labels)
		}
		f, err := strconv.ParseFloat(value, 64)
		if err != nil {
			return 0, fmt.Errorf("metrics line %q: %w", line, err)
		}
		found, v = true, f
	}
	return v, sc.Err()
}

// parseLabels reads `a="x",b="y"`, with the escapes the text format allows
// in values.
func parseLabels(s string) (map[string]string, error) {
	out := map[string]string{}
	for s != "" {
		eq := strings.IndexByte(s, '=')
		if eq < 0 || len(s) < eq+2 || s[eq+1] != '"' {
			return nil, fmt.Errorf("bad label list at %q", s)
		}
		key := s[:eq]
		rest := s[eq+1:]
		val, err := strconv.QuotedPrefix(rest)
		if err != nil {
			return nil, fmt.Errorf("bad label value at %q: %w", rest, err)
		}
		if out[key], err = strconv.Unquote(val); err != nil {
			return nil, err
		}
		s = strings.TrimPrefix(rest[len(val):], ",")
	}
	return out, nil
}

// series writes a metric and labels the way /metrics does, for messages.
func series(name string, labels map[string]string) string {
	keys := slices.Sorted(maps.Keys(labels))
	pairs := make([]string, len(keys))
	for i, k := range keys {
		pairs[i] = k + "=" + strconv.Quote(labels[k])
	}
	return name + "{" + strings.Join(pairs, ",") + "}"
}

func hasLabels(have, want map[string]string) bool {
	for k, v := range want {
		if have[k] != v {
			return false
		}
	}
	return true
}

func TestSampleFindsLabelledSeries(t *testing.T) {
	text := `# HELP snorkel_gateway_drops_total Packets the gateway discarded.
# TYPE snorkel_gateway_drops_total counter
snorkel_gateway_drops_total{reason="no_route",remote_cluster=""} 1
snorkel_gateway_drops_total{reason="spoofed_source",remote_cluster="c2"} 5
snorkel_gateway_drops_total{reason="too_big",remote_cluster="c2"} 3
snorkel_gateway_tx_packets_total{remote_cluster="c2"} 1.5e+06
`
	for _, tc := range []struct {
		name   string
		labels map[string]string
		want   float64
		err    bool
	}{
		{"snorkel_gateway_drops_total", map[string]string{"remote_cluster": "c2", "reason": "spoofed_source"}, 5, false},
		{"snorkel_gateway_drops_total", map[string]string{"remote_cluster": "", "reason": "no_route"}, 1, false},
		{"snorkel_gateway_drops_total", map[string]string{"remote_cluster": "c2", "reason": "malformed"}, 0, false},
		{"snorkel_gateway_tx_packets_total", map[string]string{"remote_cluster": "c2"}, 1.5e6, false},
		{"snorkel_gateway_drops_total", map[string]string{"remote_cluster": "c2"}, 0, true},
	} {
		got, err := sample(text, tc.name, tc.labels)
		if (err != nil) != tc.err || got != tc.want {
			t.Errorf("sample(%s, %v) = %v, %v; want %v, error %v", tc.name, tc.labels, got, err, tc.want, tc.err)
		}
	}
}
