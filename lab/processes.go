package lab

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/snorkel-net/snorkel/lab/topo"
	"github.com/snorkel-net/snorkel/transport"
)

// startPods starts whereami in every pod and waits until each answers its
// node.
func (l *Lab) startPods(ctx context.Context, inProcess bool) error {
	podCtx, cancel := context.WithCancel(context.Background())
	l.stopPods = cancel
	for _, c := range l.Plan.Clusters {
		for _, p := range c.Pods {
			ns := l.Topo.NS(p.NS)
			listen := ":" + strconv.Itoa(WhereamiPort)
			if inProcess {
				ln, err := ns.Listen("tcp", listen)
				if err != nil {
					return fmt.Errorf("lab: pod %s: %w", p.Name, err)
				}
				l.pods.Add(1)
				go func() {
					defer l.pods.Done()
					Whereami{Pod: p.Name, Cluster: p.Cluster}.Serve(podCtx, ln)
				}()
				continue
			}
			if _, err := ns.Start(podProcess(p.Name), l.Topo.Binary(), "lab-pod", "whereami", "--name", p.Name, "--cluster", p.Cluster, "--listen", listen); err != nil {
				return err
			}
		}
	}
	for _, c := range l.Plan.Clusters {
		gw := l.Topo.NS(c.Gateway.NS)
		for _, p := range c.Pods {
			url := fmt.Sprintf("http://%s/", netip.AddrPortFrom(p.IP, WhereamiPort))
			err := l.waitFor(ctx, podProcess(p.Name), func() error {
				_, err := getWhereami(ctx, gw.HTTPClient(), url)
				return err
			})
			if err != nil {
				return fmt.Errorf("lab: pod %s does not answer on %s from its node: %w", p.Name, url, err)
			}
		}
		l.step("%s: %d pods answering (whereami on :%d)", c.Spec.ID, len(c.Pods), WhereamiPort)
	}
	return nil
}

// startGateways writes each cluster's config, starts its gateway, and waits
// until every gateway has routed the remote clusters' CIDRs into its TUN.
func (l *Lab) startGateways(ctx context.Context) error {
	var pubs map[string]string
	switch l.Transport {
	case transport.WireGuard:
		var err error
		if pubs, err = l.ensureKeys(); err != nil {
			return err
		}
	case transport.ESP:
		if err := ensurePSK(PSKFile(l.StateDir)); err != nil {
			return err
		}
	}
	for i := range l.Plan.Clusters {
		c := &l.Plan.Clusters[i]
		cfg, err := l.Plan.GatewayConfig(c, l.Transport, l.StateDir, pubs)
		if err != nil {
			return err
		}
		b, err := MarshalConfig(cfg)
		if err != nil {
			return err
		}
		path := ConfigFile(l.StateDir, c.Spec.ID)
		if err := os.WriteFile(path, b, 0o644); err != nil {
			return fmt.Errorf("lab: write %s: %w", path, err)
		}
		p, err := l.startGateway(c)
		if err != nil {
			return err
		}
		l.step("%s: snorkel gateway (pid %d, %s, tun %s) config %s", c.Spec.ID, p.PID, l.Transport, c.Gateway.TUN, path)
	}
	for i := range l.Plan.Clusters {
		c := &l.Plan.Clusters[i]
		gw := l.Topo.NS(c.Gateway.NS)
		name := gatewayProcess(c.Spec.ID)
		err := l.waitFor(ctx, name, func() error {
			return missingRoutes(gw, c.Gateway.TUN, l.Plan.Remotes(c))
		})
		if err != nil {
			return fmt.Errorf("lab: gateway of %s not ready: %w\n%s", c.Spec.ID, err, logTail(l.Topo.LogPath(name), 10))
		}
	}
	l.step("gateways up: routes to remote clusters point into their TUNs")
	if l.Transport == transport.ESP {
		return l.waitIPsec(ctx)
	}
	return nil
}

// startGateway starts c's gateway on its config file.
func (l *Lab) startGateway(c *ClusterPlan) (*topo.Process, error) {
	return l.Topo.NS(c.Gateway.NS).Start(gatewayProcess(c.Spec.ID), l.Topo.Binary(), "gateway", "--config", ConfigFile(l.StateDir, c.Spec.ID),
		"--debug-address", DebugAddress, "--pprof")
}

// GatewayProcess returns the process of a cluster's gateway started last,
// running or not, or nil if the lab started none (kernel routing, or the
// agent runs the gateway).
func (l *Lab) GatewayProcess(cluster string) *topo.Process {
	var p *topo.Process
	for _, q := range l.Topo.Processes() {
		if q.Name == gatewayProcess(cluster) {
			p = q
		}
	}
	return p
}

// RestartGateway stops a cluster's gateway, if it runs, and starts a new
// one on its config file as the file is now, as a node whose gateway is
// redeployed (with a new key, say) sees it. The new process's log replaces
// the old one's. It does not wait for the new gateway to be ready.
func (l *Lab) RestartGateway(cluster string) (*topo.Process, error) {
	c := l.Plan.Cluster(cluster)
	if c == nil {
		return nil, fmt.Errorf("lab: no cluster %q in scenario %s", cluster, l.Plan.Scenario.Name)
	}
	if p := l.GatewayProcess(cluster); p != nil {
		if err := p.Stop(gatewayStopTimeout); err != nil {
			return nil, err
		}
	}
	return l.startGateway(c)
}

// waitIPsec waits until every gateway has an IKE SA and a CHILD_SA with
// every remote, so that the first packets find the tunnel keyed.
func (l *Lab) waitIPsec(ctx context.Context) error {
	for i := range l.Plan.Clusters {
		c := &l.Plan.Clusters[i]
		gw := l.Topo.NS(c.Gateway.NS)
		name := gatewayProcess(c.Spec.ID)
		err := l.waitFor(ctx, name, func() error {
			st, err := fetchStats(ctx, gw)
			if err != nil {
				return err
			}
			for _, r := range st.Remotes {
				if r.IPsec == nil || r.IPsec.State != "established" || len(r.IPsec.Children) == 0 {
					state, last := "unknown", ""
					if r.IPsec != nil {
						state, last = r.IPsec.State, r.IPsec.LastError
					}
					return fmt.Errorf("IPsec with %s is %s, no CHILD_SA yet %s", r.Cluster, state, last)
				}
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("lab: gateway of %s: %w\n%s", c.Spec.ID, err, logTail(l.Topo.LogPath(name), 10))
		}
	}
	l.step("IPsec up: an IKE SA and a CHILD_SA between every pair of gateways")
	return nil
}

// ensurePSK writes a random clusterset pre-shared key to path unless one is
// there.
func ensurePSK(path string) error {
	if _, err := os.Stat(path); err == nil {
		return nil
	}
	key := make([]byte, 32)
	rand.Read(key)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("lab: %w", err)
	}
	if err := os.WriteFile(path, []byte(base64.StdEncoding.EncodeToString(key)+"\n"), 0o600); err != nil {
		return fmt.Errorf("lab: write the pre-shared key: %w", err)
	}
	return nil
}

func gatewayProcess(cluster string) string { return "gateway-" + cluster }

func podProcess(pod string) string { return "pod-" + pod }

// pingTarget is an address of cluster r another cluster's pod can ping: a
// pod's, or with Globalnet a pod's global IP; invalid if r has none.
func pingTarget(r *ClusterPlan) netip.Addr {
	for _, p := range r.Pods {
		switch {
		case !r.Spec.GlobalCIDR.IsValid():
			return p.IP
		case p.GlobalIP.IsValid():
			return p.GlobalIP
		}
	}
	return netip.Addr{}
}

// missingRoutes reports the remote CIDRs not yet routed into tun.
func missingRoutes(gw *topo.NS, tun string, remotes []*ClusterPlan) error {
	if !gw.HasLink(tun) {
		return fmt.Errorf("no TUN device %s yet", tun)
	}
	routes, err := gw.Routes(tun)
	if err != nil {
		return err
	}
	var missing []string
	for _, r := range remotes {
		for _, dst := range r.RoutedCIDRs() {
			found := false
			for _, rt := range routes {
				if rt.Dst == dst {
					found = true
				}
			}
			if !found {
				missing = append(missing, dst.String())
			}
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("no route for %s via %s yet", strings.Join(missing, ", "), tun)
	}
	return nil
}

// waitFor polls ready until it succeeds, the process called proc (if the
// topology started one) exits, ctx ends or the ready timeout passes.
func (l *Lab) waitFor(ctx context.Context, proc string, ready func() error) error {
	var p *topo.Process
	for _, q := range l.Topo.Processes() {
		if q.Name == proc {
			p = q
		}
	}
	deadline := time.Now().Add(l.readyTimeout)
	for {
		err := ready()
		if err == nil {
			return nil
		}
		if p != nil && !p.Alive() {
			return fmt.Errorf("%s (pid %d) exited: %v; log %s", proc, p.PID, p.ExitError(), p.Log)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("after %s: %w", l.readyTimeout, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// logTail returns the last n lines of a log, indented, for error messages.
func logTail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "  (no log: " + err.Error() + ")"
	}
	if len(bytes.TrimSpace(b)) == 0 {
		return "  (" + path + " is empty)"
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return "  last lines of " + path + ":\n    " + strings.Join(lines, "\n    ")
}

// requestTimeout bounds one demo request. An answer takes milliseconds;
// the bound leaves room for a busy host and a retransmitted SYN or two.
const requestTimeout = 15 * time.Second

// getWhereami asks a whereami server who it is.
func getWhereami(ctx context.Context, c *http.Client, url string) (WhereamiReply, error) {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	return fetchWhereami(ctx, c, url)
}

// fetchWhereami is getWhereami bounded by ctx alone.
func fetchWhereami(ctx context.Context, c *http.Client, url string) (WhereamiReply, error) {
	var r WhereamiReply
	body, err := httpGet(ctx, c, url)
	if err != nil {
		return r, err
	}
	if err := json.Unmarshal(body.Bytes(), &r); err != nil {
		return r, fmt.Errorf("whereami reply %q: %w", body.String(), err)
	}
	return r, nil
}

// httpGet reads the body of a GET of url, an error unless it is 200 OK.
func httpGet(ctx context.Context, c *http.Client, url string) (*bytes.Buffer, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var body bytes.Buffer
	if _, err := body.ReadFrom(resp.Body); err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s", resp.Status, strings.TrimSpace(body.String()))
	}
	return &body, nil
}

// clientHost returns the host part of a whereami client address.
func clientHost(addr string) string {
	h, _, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	return h
}
