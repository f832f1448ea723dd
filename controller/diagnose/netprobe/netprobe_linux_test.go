package netprobe

import (
	"bytes"
	"context"
	"net"
	"net/netip"
	"os"
	"testing"
	"time"
)

// settle bounds every wait of these tests: generous, the host is shared.
const settle = 30 * time.Second

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: raw sockets")
	}
}

func TestSniffSeesTheTokenWhileAnotherSocketHoldsThePort(t *testing.T) {
	needRoot(t)
	holder, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	port := uint16(holder.LocalAddr().(*net.UDPAddr).Port)
	ctx, cancel := context.WithTimeout(context.Background(), settle)
	defer cancel()
	token := []byte("snorkel-diagnose abcdef")
	sendCtx, stopSending := context.WithCancel(ctx)
	defer stopSending()
	go SendToken(sendCtx, netip.MustParseAddr("127.0.0.1"), netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), port), token, 50*time.Millisecond)
	src, err := Sniff(ctx, port, token)
	if err != nil {
		t.Fatal(err)
	}
	if src.Addr() != netip.MustParseAddr("127.0.0.1") || src.Port() == port {
		t.Errorf("source %s, want 127.0.0.1 and the sender's own port", src)
	}
}

func TestSniffIgnoresOtherPortsAndTokens(t *testing.T) {
	needRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	dst := netip.MustParseAddrPort("127.0.0.1:9")
	go SendToken(ctx, netip.MustParseAddr("127.0.0.1"), dst, []byte("another token"), 50*time.Millisecond)
	if src, err := Sniff(ctx, 9, []byte("the token")); err == nil {
		t.Fatalf("saw the token from %s, none was sent", src)
	}
}

func TestMatchUDP(t *testing.T) {
	pkt := []byte{
		0x45, 0, 0, 35, 0, 0, 0, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2, // IPv4
		0x30, 0x39, 0x11, 0x94, 0, 15, 0, 0, // UDP 12345 → 4500
		'x', 't', 'o', 'k', 'e', 'n', 'y',
	}
	for _, tt := range []struct {
		name  string
		pkt   []byte
		port  uint16
		token string
		want  bool
	}{
		{"the port and token", pkt, 4500, "token", true},
		{"another port", pkt, 4501, "token", false},
		{"another token", pkt, 4500, "nekot", false},
		{"truncated UDP header", pkt[:24], 4500, "token", false},
		{"not UDP", append([]byte{0x45, 0, 0, 35, 0, 0, 0, 0, 64, 6}, pkt[10:]...), 4500, "token", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			src, ok := matchUDP(tt.pkt, tt.port, []byte(tt.token))
			if ok != tt.want {
				t.Fatalf("match %v, want %v", ok, tt.want)
			}
			if ok && src != netip.MustParseAddrPort("10.0.0.1:12345") {
				t.Errorf("source %s", src)
			}
		})
	}
}

func TestPingCountsReplies(t *testing.T) {
	needRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), settle)
	defer cancel()
	n, err := Ping(ctx, netip.MustParseAddr("127.0.0.1"), 3, Echo{TTL: 1, DontFragment: true, Size: 1400})
	if err != nil || n != 3 {
		t.Fatalf("%d replies, %v; want 3", n, err)
	}
}

func TestPathMTUIsTheLargestEchoThatCrosses(t *testing.T) {
	needRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), settle)
	defer cancel()
	// Loopback's MTU (65536) is above hi: every size crosses.
	got, err := PathMTU(ctx, netip.MustParseAddr("127.0.0.1"), 576, 1500, 1)
	if err != nil || got != 1500 {
		t.Fatalf("PathMTU %d, %v; want 1500", got, err)
	}
	r, err := RouteTo(netip.MustParseAddr("127.0.0.1"))
	if err != nil || r.Dev != "lo" {
		t.Fatalf("route %+v, %v; want dev lo", r, err)
	}
	// Sizes above the device's MTU are refused with DF: none crosses.
	got, err = PathMTU(ctx, netip.MustParseAddr("127.0.0.1"), r.MTU+1, r.MTU+100, 1)
	if err != nil || got != 0 {
		t.Fatalf("PathMTU above lo's MTU %d: %d, %v; want 0", r.MTU, got, err)
	}
}

func TestTCPMSS(t *testing.T) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), settle)
	defer cancel()
	mss, err := TCPMSS(ctx, netip.MustParseAddrPort(ln.Addr().String()))
	if err != nil || mss < 536 {
		t.Fatalf("MSS %d, %v", mss, err)
	}
}

// FuzzMatchUDP: any bytes a raw socket may hand over are read without a
// panic, and a match is a datagram to the port that carries the token.
func FuzzMatchUDP(f *testing.F) {
	f.Add([]byte{0x45, 0, 0, 33, 0, 0, 0, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2, 0x30, 0x39, 0x11, 0x94, 0, 13, 0, 0, 't', 'o', 'k', 'e', 'n'}, uint16(4500))
	f.Add([]byte{0x4f, 0, 0, 20}, uint16(0))
	f.Fuzz(func(t *testing.T, pkt []byte, port uint16) {
		token := []byte("token")
		if _, ok := matchUDP(pkt, port, token); ok {
			ihl := int(pkt[0]&0x0f) * 4
			if got := uint16(pkt[ihl+2])<<8 | uint16(pkt[ihl+3]); got != port || !bytes.Contains(pkt[ihl+8:], token) {
				t.Fatalf("matched a datagram to port %d without the token: % x", got, pkt)
			}
		}
	})
}
