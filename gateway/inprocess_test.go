package gateway_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.zx2c4.com/wireguard/tun/netstack"

	"github.com/snorkel-net/snorkel/gateway"
	"github.com/snorkel-net/snorkel/transport"
	"github.com/snorkel-net/snorkel/transport/wireguard"
)

// Real-time limits. go test runs packages in parallel, so on a loaded
// 2-core machine something that takes milliseconds here (a handshake, a
// probe, a counter update) can take seconds: a wait that runs out fails the
// test, so the limits are far beyond the normal time and never what is
// tested.
const (
	// settle bounds a wait for a condition that normally holds within a
	// second or so.
	settle = 60 * time.Second
	// bulk bounds a transfer of megabytes through both netstacks and the
	// tunnel, which takes seconds on an idle machine.
	bulk = 2 * time.Minute
)

// cluster is one side of an in-process test: a gateway whose "TUN" is a gVisor
// netstack standing in for the cluster's pods.
type cluster struct {
	cfg gateway.Config
	gw  *gateway.Gateway
	net *netstack.Net
	// stop ends the gateway's Run, as the test's end does.
	stop func()
}

// startPair builds clusters c1 (10.8/16, 10.88/16) and c2 (10.9/16, 10.99/16)
// joined over loopback UDP with the given transport. Each cluster's netstack
// owns the pod addresses listed.
func startPair(t *testing.T, kind string, pods1, pods2 []netip.Addr) (c1, c2 *cluster) {
	t.Helper()
	return startPairWith(t, kind, pods1, pods2, nil)
}

// startPairWith is startPair with the configurations changed by mod first.
func startPairWith(t *testing.T, kind string, pods1, pods2 []netip.Addr, mod func(cfg1, cfg2 *gateway.Config)) (c1, c2 *cluster) {
	t.Helper()
	dir := t.TempDir()
	p1, p2 := gateway.FreeUDPPort(t), gateway.FreeUDPPort(t)
	mk := func(id, pod, svc string, port int) gateway.Config {
		c := gateway.Config{
			Cluster:   gateway.Cluster{ID: id, PodCIDRs: []string{pod}, ServiceCIDRs: []string{svc}},
			TUN:       gateway.TUN{Name: "snk-" + id},
			Transport: gateway.TransportConfig{Type: kind, Port: port},
		}
		switch kind {
		case transport.WireGuard:
			c.Transport.WireGuard = &gateway.WireGuardConfig{PrivateKeyFile: filepath.Join(dir, id+".key")}
		case transport.ESP:
			c.Transport.ESP = &gateway.ESPConfig{PSK: "in-process test clusterset key"}
		}
		return c
	}
	cfg1 := mk("c1", "10.8.0.0/16", "10.88.0.0/16", p1)
	cfg2 := mk("c2", "10.9.0.0/16", "10.99.0.0/16", p2)
	r1 := gateway.Remote{ID: "c1", PodCIDRs: cfg1.Cluster.PodCIDRs, ServiceCIDRs: cfg1.Cluster.ServiceCIDRs, Endpoint: fmt.Sprintf("127.0.0.1:%d", p1)}
	r2 := gateway.Remote{ID: "c2", PodCIDRs: cfg2.Cluster.PodCIDRs, ServiceCIDRs: cfg2.Cluster.ServiceCIDRs, Endpoint: fmt.Sprintf("127.0.0.1:%d", p2)}
	if kind == transport.WireGuard {
		_, pub1, err := wireguard.LoadOrCreateKey(filepath.Join(dir, "c1.key"))
		if err != nil {
			t.Fatal(err)
		}
		_, pub2, err := wireguard.LoadOrCreateKey(filepath.Join(dir, "c2.key"))
		if err != nil {
			t.Fatal(err)
		}
		r1.WireGuard = &gateway.WireGuardRemoteConfig{PublicKey: pub1.String()}
		r2.WireGuard = &gateway.WireGuardRemoteConfig{PublicKey: pub2.String()}
	}
	cfg1.Remotes = []gateway.Remote{r2}
	cfg2.Remotes = []gateway.Remote{r1}
	if mod != nil {
		mod(&cfg1, &cfg2)
	}
	return start(t, cfg1, pods1), start(t, cfg2, pods2)
}

func start(t *testing.T, cfg gateway.Config, pods []netip.Addr) *cluster {
	t.Helper()
	gw, err := gateway.New(cfg, gateway.Options{})
	if err != nil {
		t.Fatal(err)
	}
	// The pods' stack uses a larger MTU than the tunnel carries, as pods
	// behind a real gateway do: MSS clamping and "fragmentation needed" are
	// what keep TCP working.
	dev, tnet, err := netstack.CreateNetTUN(pods, nil, 1500)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- gw.Run(ctx, dev) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("%s: Run: %v", cfg.Cluster.ID, err)
			}
		})
	}
	t.Cleanup(stop)
	return &cluster{cfg: cfg, gw: gw, net: tnet, stop: stop}
}

// streamToC2 connects c1's pod to a server on c2's pod at port, which
// hashes what arrives and sends the SHA-256 on the channel when the stream
// ends (zero if the connection failed).
func streamToC2(t *testing.T, c1, c2 *cluster, port uint16) (net.Conn, <-chan [32]byte) {
	t.Helper()
	ln, err := c2.net.ListenTCPAddrPort(netip.AddrPortFrom(pod2, port))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	sums := make(chan [32]byte, 1)
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			sums <- [32]byte{}
			return
		}
		defer conn.Close()
		h := sha256.New()
		io.Copy(h, conn)
		sums <- [32]byte(h.Sum(nil))
	}()
	ctx, cancel := context.WithTimeout(context.Background(), settle)
	defer cancel()
	conn, err := c1.net.DialContextTCPAddrPort(ctx, netip.AddrPortFrom(pod2, port))
	if err != nil {
		t.Fatalf("dial c2 pod from c1 pod: %v", err)
	}
	return conn, sums
}

var (
	pod1 = netip.MustParseAddr("10.8.1.2")
	pod2 = netip.MustParseAddr("10.9.1.2")
)

func TestInProcessTCPTransferAcrossClusters(t *testing.T) {
	for _, tr := range transport.Kinds {
		t.Run(tr, func(t *testing.T) {
			c1, c2 := startPair(t, tr, []netip.Addr{pod1}, []netip.Addr{pod2})
			const size = 16 << 20
			conn, sums := streamToC2(t, c1, c2, 8080)
			payload := make([]byte, size)
			rand.NewChaCha8([32]byte{3, 4}).Read(payload)
			conn.SetDeadline(time.Now().Add(bulk))
			if _, err := conn.Write(payload); err != nil {
				t.Fatalf("write: %v", err)
			}
			conn.Close()
			select {
			case got := <-sums:
				if want := sha256.Sum256(payload); got != want {
					t.Fatalf("c2 received %x, c1 sent %x", got, want)
				}
			case <-time.After(bulk):
				t.Fatal("transfer did not finish")
			}
			st := c1.gw.Stats()
			if st.Remotes[0].TxBytes < size {
				t.Errorf("c1 counted %d bytes out to c2, sent %d", st.Remotes[0].TxBytes, size)
			}
			if rx := c2.gw.Stats().Remotes[0].RxBytes; rx < size {
				t.Errorf("c2 counted %d bytes in from c1, sent %d", rx, size)
			}
		})
	}
}

// echoServer sends every UDP datagram to at, on c's pods, back to its sender.
func echoServer(t *testing.T, c *cluster, at netip.AddrPort) {
	t.Helper()
	srv, err := c.net.ListenUDPAddrPort(at)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	go func() {
		buf := make([]byte, 2048)
		for {
			n, from, err := srv.ReadFrom(buf)
			if err != nil {
				return
			}
			srv.WriteTo(buf[:n], from)
		}
	}()
}

// awaitEcho sends datagrams from c's pod1 to the echo server at dst until
// one comes back, failing t after settle.
func awaitEcho(t *testing.T, c *cluster, dst netip.AddrPort) {
	t.Helper()
	cl, err := c.net.DialUDPAddrPort(netip.AddrPortFrom(pod1, 0), dst)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	// The first datagrams may race the handshake, so send a new one every
	// two seconds until an echo comes back. On a slow machine that echo
	// may answer an earlier datagram.
	buf := make([]byte, 2048)
	sent := map[string]bool{}
	for i, deadline := 0, time.Now().Add(settle); time.Now().Before(deadline); i++ {
		msg := fmt.Sprintf("datagram %d", i)
		sent[msg] = true
		cl.SetDeadline(time.Now().Add(2 * time.Second))
		if _, err := cl.Write([]byte(msg)); err != nil {
			t.Fatal(err)
		}
		n, err := cl.Read(buf)
		if err != nil {
			continue
		}
		if !sent[string(buf[:n])] {
			t.Fatalf("echo %q, sent datagrams 0 to %d", buf[:n], i)
		}
		return
	}
	t.Fatalf("no UDP echo came back from %s within %v", dst, settle)
}

func TestInProcessUDPEchoAcrossClusters(t *testing.T) {
	for _, tr := range transport.Kinds {
		t.Run(tr, func(t *testing.T) {
			c1, c2 := startPair(t, tr, []netip.Addr{pod1}, []netip.Addr{pod2})
			echo := netip.AddrPortFrom(pod2, 5353)
			echoServer(t, c2, echo)
			awaitEcho(t, c1, echo)
		})
	}
}

func TestInProcessSpoofedSourceIsDroppedAndCounted(t *testing.T) {
	spoof := netip.MustParseAddr("10.200.0.1") // in no cluster's CIDRs
	for _, tr := range transport.Kinds {
		t.Run(tr, func(t *testing.T) {
			c1, c2 := startPair(t, tr, []netip.Addr{pod1, spoof}, []netip.Addr{pod2})
			srv, err := c2.net.ListenUDPAddrPort(netip.AddrPortFrom(pod2, 9999))
			if err != nil {
				t.Fatal(err)
			}
			defer srv.Close()
			var mu sync.Mutex
			var got []netip.AddrPort
			go func() {
				buf := make([]byte, 2048)
				for {
					_, from, err := srv.ReadFrom(buf)
					if err != nil {
						return
					}
					mu.Lock()
					got = append(got, netip.MustParseAddrPort(from.String()))
					mu.Unlock()
				}
			}()
			send := func(from netip.Addr, n int) {
				cl, err := c1.net.DialUDPAddrPort(netip.AddrPortFrom(from, 0), netip.AddrPortFrom(pod2, 9999))
				if err != nil {
					t.Fatal(err)
				}
				defer cl.Close()
				for i := 0; i < n; i++ {
					cl.Write([]byte("x"))
					time.Sleep(20 * time.Millisecond)
				}
			}
			// Genuine datagrams until one arrives: the tunnel is up (the
			// WireGuard handshake done, the IKE SA and CHILD_SA in place).
			for deadline := time.Now().Add(settle); ; {
				send(pod1, 5)
				mu.Lock()
				up := len(got) > 0
				mu.Unlock()
				if up {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("no genuine datagram reached the c2 pod in %v", settle)
				}
			}
			send(spoof, 5)
			deadline := time.Now().Add(settle)
			for time.Now().Before(deadline) {
				if spoofedDrops(c2) >= 5 {
					break
				}
				time.Sleep(50 * time.Millisecond)
			}
			if n := spoofedDrops(c2); n < 5 {
				t.Fatalf("c2 counted %d spoofed-source drops, want at least 5", n)
			}
			mu.Lock()
			defer mu.Unlock()
			for _, a := range got {
				if a.Addr() == spoof {
					t.Fatalf("a datagram from spoofed source %s reached the c2 pod", spoof)
				}
			}
			if len(got) == 0 {
				t.Fatal("no genuine datagram reached the c2 pod")
			}
		})
	}
}

// spoofedDrops sums spoofed-source drops wherever the layer that caught them
// counted them: the gateway (by the sending cluster or unattributed) or the
// transport (WireGuard's cryptokey routing).
func spoofedDrops(c *cluster) uint64 {
	st := c.gw.Stats()
	n := st.Unattributed["spoofed_source"]
	for _, r := range st.Remotes {
		n += r.Drops["spoofed_source"]
	}
	for _, d := range c.gw.TransportDrops() {
		if d.Reason == "spoofed_source" {
			n += d.Count
		}
	}
	return n
}

func TestMetricsUseSubmarinerNames(t *testing.T) {
	c1, _ := startPair(t, transport.VXLAN, []netip.Addr{pod1}, []netip.Addr{pod2})
	cl, err := c1.net.DialUDPAddrPort(netip.AddrPortFrom(pod1, 0), netip.AddrPortFrom(pod2, 7))
	if err != nil {
		t.Fatal(err)
	}
	cl.Write([]byte("count me"))
	cl.Close()
	srv := httptest.NewServer(c1.gw.MetricsHandler())
	defer srv.Close()
	var body string
	for deadline := time.Now().Add(settle); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		resp, err := http.Get(srv.URL + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		body = string(b)
		// The established timestamp follows c2's answer (an ICMP port
		// unreachable from its netstack), which comes after the send.
		if strings.Contains(body, `snorkel_gateway_tx_packets_total{remote_cluster="c2"} 1`) &&
			strings.Contains(body, "submariner_connection_established_timestamp") {
			break
		}
	}
	for _, want := range []string{
		`submariner_gateway_tx_bytes{cable_driver="vxlan",local_cluster="c1"`,
		`submariner_gateway_rx_bytes{cable_driver="vxlan",local_cluster="c1"`,
		`submariner_connections{cable_driver="vxlan",local_cluster="c1"`,
		`submariner_connection_established_timestamp{cable_driver="vxlan",local_cluster="c1"`,
		`remote_cluster="c2"`,
		`snorkel_gateway_tx_packets_total{remote_cluster="c2"} 1`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s:\n%s", want, body)
		}
	}
}

// TestInProcessStreamSurvivesAnotherRemoteChanging runs a TCP stream from
// c1 to c2 while c1's gateway gets a third remote, sees its key change, and
// loses it again, each applied in place: the stream must arrive whole, and
// c2's tunnel must be the one it was (for ESP, the same IKE SA).
func TestInProcessStreamSurvivesAnotherRemoteChanging(t *testing.T) {
	for _, tr := range transport.Kinds {
		t.Run(tr, func(t *testing.T) {
			c1, c2 := startPair(t, tr, []netip.Addr{pod1}, []netip.Addr{pod2})
			conn, sums := streamToC2(t, c1, c2, 8081)
			conn.SetDeadline(time.Now().Add(bulk))
			ipsecBefore := c1.gw.Stats().Remotes[0].IPsec

			// The stream runs in chunks; between chunks c1's remotes change.
			chunk := make([]byte, 1<<20)
			h := sha256.New()
			send := func() {
				rand.NewChaCha8([32]byte{byte(h.Size())}).Read(chunk)
				if _, err := conn.Write(chunk); err != nil {
					t.Fatalf("write: %v", err)
				}
				h.Write(chunk)
			}
			c3 := func(key string) gateway.Config {
				cfg := c1.cfg
				r := gateway.Remote{ID: "c3", PodCIDRs: []string{"10.7.0.0/16"}, Endpoint: fmt.Sprintf("127.0.0.3:%d", gateway.FreeUDPPort(t))}
				if tr == transport.WireGuard {
					r.WireGuard = &gateway.WireGuardRemoteConfig{PublicKey: key}
				}
				cfg.Remotes = append(slices.Clone(cfg.Remotes), r)
				return cfg
			}
			k1, _ := wireguard.GenerateKey()
			k2, _ := wireguard.GenerateKey()
			for _, step := range []struct {
				name string
				cfg  gateway.Config
			}{
				{"c3 joins", c3(k1.Public().String())},
				{"c3's key is rotated", c3(k2.Public().String())},
				{"c3 leaves", c1.cfg},
			} {
				send()
				s, err := step.cfg.Compile()
				if err != nil {
					t.Fatal(err)
				}
				if err := c1.gw.Update(s); err != nil {
					t.Fatalf("%s: %v", step.name, err)
				}
				if n := len(c1.gw.Stats().Remotes); n != len(step.cfg.Remotes) {
					t.Errorf("%s: c1 shows %d remotes, want %d", step.name, n, len(step.cfg.Remotes))
				}
			}
			send()
			conn.Close()
			select {
			case got := <-sums:
				if want := [32]byte(h.Sum(nil)); got != want {
					t.Fatalf("c2 received %x, c1 sent %x", got, want)
				}
			case <-time.After(bulk):
				t.Fatal("the stream did not finish")
			}
			if ipsecBefore != nil {
				after := c1.gw.Stats().Remotes[0].IPsec
				if after == nil || after.IKESPIs != ipsecBefore.IKESPIs {
					t.Errorf("c2's IKE SA changed from %s to %+v while c3 came and went", ipsecBefore.IKESPIs, after)
				}
			}
		})
	}
}
