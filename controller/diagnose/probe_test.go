package diagnose

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/snorkel-net/snorkel/controller/api"
	submv1 "github.com/snorkel-net/snorkel/controller/api/v1"
	"github.com/snorkel-net/snorkel/controller/broker"
	"github.com/snorkel-net/snorkel/controller/internal/statusline"
)

// lines is a result's notes, one per line, with their marks.
func lines(r *result) string {
	var b strings.Builder
	for _, n := range r.Notes() {
		b.WriteString(string(n.Mark) + " " + n.Text + "\n")
	}
	return b.String()
}

func TestJudgeSniff(t *testing.T) {
	p := tunnelProbe{What: "UDP port", From: "c1-gateway", Src: "198.18.1.10", To: "c2", ToNode: "c2-gateway", Addr: "198.18.2.10", Port: 4500}
	for _, tt := range []struct {
		name   string
		res    podResult
		failed bool
		want   string
	}{
		{"the token seen passes, naming both ends", podResult{ok: true, line: "saw the token from 198.18.1.10:40001"},
			false, "UDP port 4500 is open: datagrams from gateway node c1-gateway (198.18.1.10) reach cluster \"c2\"'s gateway node c2-gateway at 198.18.2.10:4500 (seen from 198.18.1.10:40001)"},
		{"no datagram fails naming the port and the fix", podResult{line: "sniff-udp: no datagram to UDP port 4500 with the token arrived within 30s: context deadline exceeded"},
			true, "UDP port 4500 is blocked: datagrams from gateway node c1-gateway (198.18.1.10) to cluster \"c2\"'s gateway at 198.18.2.10:4500 never reached node c2-gateway: open UDP port 4500 from 198.18.1.10 to 198.18.2.10"},
		{"a sniffer that never ran is no verdict on the firewall", podResult{line: "probe pod probe-1-sniff-udp-0 on node c2-gateway did not finish within 1m30s (--validation-timeout): ErrImageNeverPull"},
			true, "Cannot probe UDP port 4500 to cluster \"c2\": probe pod"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := newResult(false)
			judgeSniff(r, tt.res, p)
			if r.Failed() != tt.failed || !strings.Contains(lines(r), tt.want) {
				t.Errorf("failed %v, got\n%s\nwant a line with %q", r.Failed(), lines(r), tt.want)
			}
		})
	}
}

func TestJudgeHealthPing(t *testing.T) {
	for _, tt := range []struct {
		name   string
		res    podResult
		failed bool
		want   string
	}{
		{"answered echoes pass, counted", podResult{ok: true, line: "replies 4/5 from 10.9.0.1"}, false, "4 of 5 ICMP echoes from gateway node c1-gateway to cluster \"c2\"'s health-check IP 10.9.0.1 came back"},
		{"no echo back fails", podResult{ok: true, line: "replies 0/5 from 10.9.0.1"}, true, "The health-check path is blocked: none of 5 ICMP echoes"},
		{"a ping that could not run says why", podResult{line: "ping: netprobe: raw socket (needs CAP_NET_RAW): operation not permitted"}, true, "Cannot probe the health-check path to cluster \"c2\": ping: netprobe: raw socket"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := newResult(false)
			judgeHealthPing(r, tt.res, "c1-gateway", "c2", "10.9.0.1")
			if r.Failed() != tt.failed || !strings.Contains(lines(r), tt.want) {
				t.Errorf("failed %v, got\n%s\nwant a line with %q", r.Failed(), lines(r), tt.want)
			}
		})
	}
}

func TestJudgeSniffNamesTheNATDiscoveryPort(t *testing.T) {
	p := tunnelProbe{What: "NAT discovery's UDP port", From: "c1-gateway", Src: "198.18.1.10", To: "c2", ToNode: "c2-gateway", Addr: "198.18.2.10", Port: 4490}
	r := newResult(false)
	judgeSniff(r, podResult{line: "sniff-udp: no datagram to UDP port 4490 with the token arrived within 30s: context deadline exceeded"}, p)
	if want := "✗ NAT discovery's UDP port 4490 is blocked: datagrams from gateway node c1-gateway (198.18.1.10) to cluster \"c2\"'s gateway at 198.18.2.10:4490 never reached node c2-gateway: open UDP port 4490"; !strings.Contains(lines(r), want) {
		t.Errorf("got\n%s\nwant a line with %q", lines(r), want)
	}
}

func TestNATDiscoveryPortIsTheEndpoints(t *testing.T) {
	for _, tt := range []struct {
		config map[string]string
		want   int
	}{
		{map[string]string{"natt-discovery-port": "4491"}, 4491},
		{nil, 4490},
		{map[string]string{"natt-discovery-port": "none"}, 4490},
	} {
		if got := natDiscoveryPort(&submv1.EndpointSpec{BackendConfig: tt.config}); got != tt.want {
			t.Errorf("backend config %v: port %d, want %d", tt.config, got, tt.want)
		}
	}
}

func TestJudgeMetrics(t *testing.T) {
	for _, tt := range []struct {
		name   string
		res    podResult
		failed bool
		want   string
	}{
		{"a connection passes", podResult{ok: true, line: "connected to 198.18.1.10:9898"}, false, "Node c1-worker reaches the agent's metrics on gateway node c1-gateway at 198.18.1.10:9898"},
		{"a refused or dropped connection fails naming the node, the port and the fix",
			podResult{line: "tcp-connect: dial tcp 198.18.1.10:9898: i/o timeout"}, true,
			"✗ Node c1-worker cannot open a TCP connection to the agent's metrics on gateway node c1-gateway at 198.18.1.10:9898 (dial tcp 198.18.1.10:9898: i/o timeout): open TCP port 9898 from the cluster's nodes to the gateway nodes"},
		{"a probe that never ran is no verdict on the firewall", podResult{line: "probe pod probe-1-tcp-connect-0 on node c1-worker did not finish within 1m30s (--validation-timeout): ErrImageNeverPull"},
			true, "Cannot probe the metrics port from node c1-worker: probe pod"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := newResult(true)
			judgeMetrics(r, tt.res, "c1-worker", "c1-gateway", "198.18.1.10:9898")
			if r.Failed() != tt.failed || !strings.Contains(lines(r), tt.want) {
				t.Errorf("failed %v, got\n%s\nwant a line with %q", r.Failed(), lines(r), tt.want)
			}
		})
	}
}

func TestJudgeAdjacent(t *testing.T) {
	r := newResult(true)
	if !judgeAdjacent(r, podResult{ok: true, line: "replies 3/3 from 198.18.1.10"}, "c1-worker", "c1-gateway", "198.18.1.10") || r.Failed() {
		t.Errorf("an answered TTL-1 echo should pass:\n%s", lines(r))
	}
	r = newResult(false)
	if judgeAdjacent(r, podResult{ok: true, line: "replies 0/3 from 198.18.1.10"}, "c1-worker", "c1-gateway", "198.18.1.10") ||
		!strings.Contains(lines(r), "Node c1-worker does not reach the active gateway node c1-gateway at 198.18.1.10 in one hop") {
		t.Errorf("no echo with TTL 1 should fail naming the node:\n%s", lines(r))
	}
}

func TestJudgePath(t *testing.T) {
	base := pathProbe{Peer: "c2", Gateway: "c1-gateway", Node: "c1-worker", Dev: "snorkel0", TUNMTU: 1420}
	for _, tt := range []struct {
		name          string
		largest, mss  int
		mark          statusline.Mark
		want, notWant string
	}{
		{"the TUN MTU crosses and the MSS is clamped", 1420, 1368, statusline.OK, "Packets up to 1420 bytes with DF set cross from node c1-worker to cluster \"c2\", the MTU of snorkel0 on gateway node c1-gateway, and TCP's MSS is 1368 (at most 1380)", ""},
		{"an MSS above the tunnel's fails: the clamp did not apply", 1420, 1448, statusline.Fail, "settles on an MSS of 1448, above the 1380 that fits the tunnel", "Packets up to"},
		{"a path narrower than the TUN MTU says which MTU to set", 1400, 1368, statusline.Fail, "is 1400 bytes, less than the MTU 1420 of snorkel0 on gateway node c1-gateway: the network between the gateways carries less than the tunnel needs; raise its MTU by 20 bytes, or set the pods' MTU to 1400", ""},
		{"nothing crossing fails", 0, 1368, statusline.Fail, "No ICMP echo from node c1-worker to a pod of cluster \"c2\" came back", ""},
		{"a path wider than the TUN MTU warns that it bypasses the tunnel", 1500, 1368, statusline.Warn, "does not go through the gateway's TUN device", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := base
			p.Largest, p.MSS = tt.largest, tt.mss
			r := newResult(false)
			judgePath(r, p)
			got := lines(r)
			if r.Worst() != tt.mark || !strings.Contains(got, tt.want) || (tt.notWant != "" && strings.Contains(got, tt.notWant)) {
				t.Errorf("mark %v, got\n%s\nwant %v and a line with %q", r.Worst(), got, tt.mark, tt.want)
			}
		})
	}
}

func TestJudgeMasquerade(t *testing.T) {
	p := masqueradeProbe{Node: "c1-worker", Peer: "c2", Namespace: api.AgentNamespace, RouteAgent: true}
	for _, tt := range []struct {
		name       string
		res        podResult
		routeAgent bool
		want       string
	}{
		{"a rewritten source names the node, the address seen and the bypass table", podResult{line: "fetch: http://10.9.0.5:8080/ saw the client as 198.18.1.11, want an address in 10.8.1.7/32"}, true,
			"A masquerade rule on node c1-worker rewrites cross-cluster traffic: cluster \"c2\" saw a pod of node c1-worker as 198.18.1.11, not its own address: check the route agent's bypass on node c1-worker (`nft list table ip snorkel-routeagent`)"},
		{"no answer without a route agent names the node and the missing pod", podResult{line: "fetch: Get \"http://10.9.0.5:8080/\": context deadline exceeded"}, false,
			"A pod on node c1-worker gets no answer from a pod of cluster \"c2\""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			q := p
			q.RouteAgent = tt.routeAgent
			r := newResult(false)
			if judgeMasquerade(r, tt.res, q) || !strings.Contains(lines(r), tt.want) {
				t.Errorf("got\n%s\nwant a failure with %q", lines(r), tt.want)
			}
			if !tt.routeAgent && !strings.Contains(lines(r), "no route agent pod runs on node c1-worker") {
				t.Errorf("the fix should say no route agent runs there:\n%s", lines(r))
			}
		})
	}
	g := p
	g.GlobalCIDR = "120.1.0.0/24"
	r := newResult(false)
	want := "cluster \"c2\" saw a pod of node c1-worker as 198.18.1.11, not an address of this cluster's global CIDR 120.1.0.0/24"
	if judgeMasquerade(r, podResult{line: "fetch: http://120.2.0.5:8080/ saw the client as 198.18.1.11, want an address in 120.1.0.0/24"}, g) || !strings.Contains(lines(r), want) {
		t.Errorf("under Globalnet, got\n%s\nwant a failure with %q", lines(r), want)
	}
	r = newResult(true)
	if !judgeMasquerade(r, podResult{ok: true, line: "http://10.9.0.5:8080/ answered from pod diagnose in cluster c2, client 10.8.1.7:40000"}, p) || r.Failed() {
		t.Errorf("the pod's own address should pass:\n%s", lines(r))
	}
}

// TestRouteAgentCoverage runs on a real API server: a ready node without
// a running route agent pod fails the CNI check, naming the node.
func TestRouteAgentCoverage(t *testing.T) {
	c1, _, _ := setUpClusterset(t)
	ctx := t.Context()
	node, err := c1.kc.CoreV1().Nodes().Get(ctx, c1.s.Name+"-node", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}
	mustDo(t, "node ready", func() error {
		_, err := c1.kc.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{})
		return err
	})

	out, err := diagnoseOf(t, c1, CNI, false)
	want := "✗ No route agent pod runs on node c1-node: pods there have no route to the gateway"
	if err == nil || !strings.Contains(out, want) {
		t.Fatalf("err %v, output\n%s\nwant a line with %q", err, out, want)
	}
	startRouteAgentPod(ctx, t, c1, node.Name)
	out, err = diagnoseOf(t, c1, CNI, false)
	if err != nil || !strings.Contains(out, "✓ The route agent runs on all 1 ready nodes") {
		t.Fatalf("err %v, output\n%s", err, out)
	}
}

// startRouteAgentPod makes a running pod of the route agent DaemonSet on
// node, as the kubelet would report it.
func startRouteAgentPod(ctx context.Context, t *testing.T, m *member, node string) {
	t.Helper()
	ds, err := m.kc.AppsV1().DaemonSets(api.AgentNamespace).Get(ctx, broker.RouteAgentDaemonSet, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: broker.RouteAgentDaemonSet + "-x1", Namespace: ds.Namespace, Labels: ds.Spec.Template.Labels},
		Spec:       corev1.PodSpec{NodeName: node, ServiceAccountName: ds.Spec.Template.Spec.ServiceAccountName, Containers: []corev1.Container{{Name: "route-agent", Image: "snorkel"}}},
	}
	mustDo(t, "route agent pod", func() error {
		p, err := m.kc.CoreV1().Pods(ds.Namespace).Create(ctx, pod, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		p.Status.Phase = corev1.PodRunning
		_, err = m.kc.CoreV1().Pods(ds.Namespace).UpdateStatus(ctx, p, metav1.UpdateOptions{})
		return err
	})
}
