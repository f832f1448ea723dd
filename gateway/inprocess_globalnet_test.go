package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/snorkel-net/snorkel/gateway"
	"github.com/snorkel-net/snorkel/transport"
)

// The Globalnet pair: both clusters use the same CIDRs, and both netstacks
// own the same pod address.
var (
	samePod  = netip.MustParseAddr("10.7.1.2")
	dbGlobal = netip.MustParseAddr("242.2.0.10") // c2's pod, exported as headless
)

func startGlobalnetPair(t *testing.T) (c1, c2 *cluster) {
	t.Helper()
	return startGlobalnetPairWith(t, nil)
}

// startGlobalnetPairWith is startGlobalnetPair with the configurations
// changed by mod first.
func startGlobalnetPairWith(t *testing.T, mod func(cfg1, cfg2 *gateway.Config)) (c1, c2 *cluster) {
	t.Helper()
	p1, p2 := gateway.FreeUDPPort(t), gateway.FreeUDPPort(t)
	mk := func(id, global string, port int, remote, remoteGlobal string, remotePort int) gateway.Config {
		return gateway.Config{
			Cluster:   gateway.Cluster{ID: id, PodCIDRs: []string{"10.7.0.0/16"}, ServiceCIDRs: []string{"10.77.0.0/16"}},
			TUN:       gateway.TUN{Name: "snk-" + id},
			Transport: gateway.TransportConfig{Type: transport.VXLAN, Port: port},
			Globalnet: &gateway.Globalnet{GlobalCIDR: global},
			Remotes: []gateway.Remote{{
				ID: remote, GlobalCIDR: remoteGlobal, Endpoint: fmt.Sprintf("127.0.0.1:%d", remotePort),
			}},
		}
	}
	cfg1 := mk("c1", "242.1.0.0/16", p1, "c2", "242.2.0.0/16", p2)
	cfg2 := mk("c2", "242.2.0.0/16", p2, "c1", "242.1.0.0/16", p1)
	cfg2.Globalnet.Ingress = []gateway.GlobalIngress{{Name: "db-0", Kind: gateway.IngressKindHeadlessPod, GlobalIP: dbGlobal.String(), LocalIP: samePod.String()}}
	if mod != nil {
		mod(&cfg1, &cfg2)
	}
	return start(t, cfg1, []netip.Addr{samePod}), start(t, cfg2, []netip.Addr{samePod})
}

func TestInProcessGlobalnetTCPBetweenOverlappingClusters(t *testing.T) {
	c1, c2 := startGlobalnetPair(t)
	ln, err := c2.net.ListenTCPAddrPort(netip.AddrPortFrom(samePod, 8080))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	type accepted struct {
		from netip.AddrPort
		got  string
	}
	done := make(chan accepted, 1)
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			done <- accepted{}
			return
		}
		defer conn.Close()
		b, _ := io.ReadAll(io.LimitReader(conn, 5))
		conn.Write([]byte("pong"))
		done <- accepted{netip.MustParseAddrPort(conn.RemoteAddr().String()), string(b)}
	}()
	ctx, cancel := context.WithTimeout(t.Context(), settle)
	defer cancel()
	conn, err := c1.net.DialContextTCPAddrPort(ctx, netip.AddrPortFrom(dbGlobal, 8080))
	if err != nil {
		t.Fatalf("dial c2's headless pod at %s from c1's pod of the same address: %v", dbGlobal, err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(settle))
	conn.Write([]byte("ping!"))
	reply, _ := io.ReadAll(io.LimitReader(conn, 4))
	var a accepted
	select {
	case a = <-done:
	case <-time.After(settle):
		t.Fatal("c2's pod accepted nothing")
	}
	egress := c1.gw.Stats().Globalnet.ClusterEgressIPs
	if a.got != "ping!" || string(reply) != "pong" {
		t.Errorf("c2's pod read %q and c1's pod read %q; want ping! and pong", a.got, reply)
	}
	if !slices.Contains(egress, a.from.Addr()) {
		t.Errorf("c2's pod saw the client as %s; want one of c1's cluster egress IPs %v", a.from, egress)
	}

	dbg := httptest.NewServer(c1.gw.DebugHandler())
	defer dbg.Close()
	var flows []gateway.FlowStatus
	getJSON(t, dbg.URL+"/flows", &flows)
	local := netip.MustParseAddrPort(conn.LocalAddr().String())
	found := false
	for _, f := range flows {
		if f.Original.Src == local && f.Original.Dst == netip.AddrPortFrom(dbGlobal, 8080) {
			found = true
			if f.Reply.Dst.Addr() != a.from.Addr() || f.Protocol != "tcp" || f.Inbound {
				t.Errorf("flow %+v; want an outbound tcp flow whose replies go to %s", f, a.from.Addr())
			}
		}
	}
	if !found {
		t.Errorf("/flows of c1 lacks %s → %s:8080: %+v", local, dbGlobal, flows)
	}
	srv := httptest.NewServer(c1.gw.MetricsHandler())
	defer srv.Close()
	metrics := getText(t, srv.URL+"/metrics")
	for _, want := range []string{"snorkel_nat_flows 1", "snorkel_nat_flows_created_total 1", `snorkel_nat_flows_removed_total{cause="expired"} 0`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics of c1 lacks %q:\n%s", want, metrics)
		}
	}
	if st := c2.gw.Stats().Globalnet; st == nil || st.NAT == nil || st.NAT.Created != 1 {
		t.Errorf("c2's /status Globalnet %+v; want the NAT engine's counters with one flow created", st)
	}
}

func TestFlowsEndpointWithGlobalnetOff(t *testing.T) {
	c1, _ := startPair(t, transport.VXLAN, []netip.Addr{pod1}, []netip.Addr{pod2})
	dbg := httptest.NewServer(c1.gw.DebugHandler())
	defer dbg.Close()
	resp, err := http.Get(dbg.URL + "/flows")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound || !strings.Contains(string(b), "Globalnet is off") {
		t.Errorf("/flows without Globalnet: %s %q; want 404 saying Globalnet is off", resp.Status, b)
	}
	srv := httptest.NewServer(c1.gw.MetricsHandler())
	defer srv.Close()
	if strings.Contains(getText(t, srv.URL+"/metrics"), "snorkel_nat_") {
		t.Error("/metrics has NAT series without Globalnet")
	}
}

func getText(t *testing.T, url string) string {
	t.Helper()
	code, body := get(t, url)
	if code != http.StatusOK {
		t.Fatalf("GET %s: %d", url, code)
	}
	return body
}

func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(getText(t, url)), v); err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
}
