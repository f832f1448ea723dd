package dnsd

import (
	"context"
	"encoding/binary"
	"math/rand/v2"
	"net"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// running is a Server serving on loopback.
type running struct {
	udp, tcp string
	stop     func() error
}

func serve(t *testing.T, s *Server) *running {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, pc, ln) }()
	r := &running{udp: pc.LocalAddr().String(), tcp: ln.Addr().String()}
	stopped := false
	r.stop = func() error {
		if stopped {
			return nil
		}
		stopped = true
		cancel()
		return <-done
	}
	t.Cleanup(func() {
		if err := r.stop(); err != nil {
			t.Error(err)
		}
	})
	return r
}

// exchangeNet asks over the network with a deadline: a server that
// stalls fails the test instead of hanging it. Over UDP it asks again every
// two seconds, as resolvers do: the kernel drops datagrams when the
// socket's buffer is full, as it may be right after a flood of garbage.
func exchangeNet(t *testing.T, network, addr string, r *dns.Msg) *dns.Msg {
	t.Helper()
	if network != "udp" {
		c := &dns.Client{Net: network, Timeout: settle}
		m, _, err := c.Exchange(r, addr)
		if err != nil {
			t.Fatalf("%s query %v to %s: %v", network, r.Question, addr, err)
		}
		return m
	}
	c := &dns.Client{Net: network, Timeout: 2 * time.Second}
	var err error
	for deadline := time.Now().Add(settle); time.Now().Before(deadline); {
		var m *dns.Msg
		if m, _, err = c.Exchange(r, addr); err == nil {
			return m
		}
	}
	t.Fatalf("%s query %v to %s: %v", network, r.Question, addr, err)
	return nil
}

func TestServeUDPAndTCP(t *testing.T) {
	st := tutorial()
	st.Services = append(st.Services, bigHeadless(100))
	srv := serve(t, newServer(t, Config{}, st))

	m := exchangeNet(t, "udp", srv.udp, query("c2.whereami-cs"+zone, dns.TypeA, false))
	if !equal(addrs(m.Answer), []string{"10.99.0.10"}) {
		t.Errorf("UDP: %v", m.Answer)
	}
	m = exchangeNet(t, "tcp", srv.tcp, query("c2.whereami-cs"+zone, dns.TypeA, true))
	if !equal(addrs(m.Answer), []string{"10.99.0.10"}) || m.IsEdns0() == nil {
		t.Errorf("TCP: %v", m)
	}

	// Too big for UDP: truncated, and whole over TCP.
	m = exchangeNet(t, "udp", srv.udp, query("big"+zone, dns.TypeA, true))
	if !m.Truncated || len(m.Answer) >= 100 {
		t.Errorf("100 pods over UDP: TC %v with %d records, want TC and fewer", m.Truncated, len(m.Answer))
	}
	m = exchangeNet(t, "tcp", srv.tcp, query("big"+zone, dns.TypeA, true))
	if m.Truncated || len(m.Answer) != 100 {
		t.Errorf("100 pods over TCP: TC %v with %d records, want all 100", m.Truncated, len(m.Answer))
	}

	// Several queries on one TCP connection.
	conn, err := dns.Dial("tcp", srv.tcp)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for i := range 3 {
		r := query("whereami-0.c2.whereami-ss"+zone, dns.TypeA, false)
		r.Id = uint16(100 + i)
		if err := conn.WriteMsg(r); err != nil {
			t.Fatal(err)
		}
		conn.SetReadDeadline(time.Now().Add(settle))
		m, err := conn.ReadMsg()
		if err != nil || m.Id != r.Id || !equal(addrs(m.Answer), []string{"10.9.0.12"}) {
			t.Fatalf("query %d on one TCP connection: %v %v", i, m, err)
		}
	}
}

// Garbage never crashes the server nor keeps it from answering the next
// client: short and random packets, responses, compression loops, and
// TCP clients that send half a message or nothing and hold on.
func TestMalformedPacketsNeitherCrashNorStall(t *testing.T) {
	srv := serve(t, newServer(t, Config{}, tutorial()))
	valid, err := query("whereami-0.c2.whereami-ss"+zone, dns.TypeA, false).Pack()
	if err != nil {
		t.Fatal(err)
	}
	response := append([]byte(nil), valid...)
	response[2] |= 0x80 // QR
	loop := append([]byte(nil), valid[:12]...)
	loop = append(loop, 0xc0, 12, 0, 1, 0, 1) // a name pointing at itself
	wrongCount := append([]byte(nil), valid...)
	binary.BigEndian.PutUint16(wrongCount[4:], 40) // 40 questions, 1 present
	packets := [][]byte{nil, {0}, valid[:5], valid[:12], valid[:len(valid)-3], response, loop, wrongCount}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		p := make([]byte, rng.IntN(600))
		for i := range p {
			p[i] = byte(rng.Uint32())
		}
		packets = append(packets, p)
	}
	for i := range 500 {
		// Valid messages with bytes flipped.
		p := append([]byte(nil), valid...)
		p[rng.IntN(len(p))] ^= byte(1 + i%255)
		packets = append(packets, p)
	}

	// TCP clients that stall: half a message, a length with nothing
	// after it, a connection that sends nothing.
	var held []net.Conn
	for _, data := range [][]byte{append([]byte{0, byte(len(valid))}, valid[:7]...), {0x40, 0}, nil} {
		c, err := net.Dial("tcp", srv.tcp)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
		if _, err := c.Write(data); err != nil {
			t.Fatal(err)
		}
	}
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()

	u, err := net.Dial("udp", srv.udp)
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	for _, p := range packets {
		if _, err := u.Write(p); err != nil {
			t.Fatal(err)
		}
	}
	// Garbage over TCP too, each message on its own connection.
	for _, p := range packets[:50] {
		c, err := net.Dial("tcp", srv.tcp)
		if err != nil {
			t.Fatal(err)
		}
		c.Write(binary.BigEndian.AppendUint16(nil, uint16(len(p))))
		c.Write(p)
		c.Close()
	}

	for _, network := range []string{"udp", "tcp"} {
		addr := srv.udp
		if network == "tcp" {
			addr = srv.tcp
		}
		m := exchangeNet(t, network, addr, query("whereami-0.c2.whereami-ss"+zone, dns.TypeA, false))
		if !equal(addrs(m.Answer), []string{"10.9.0.12"}) {
			t.Errorf("%s after the garbage: %v", network, m)
		}
	}
	// A message of several questions is refused with FORMERR, not dropped.
	r := query("whereami-cs"+zone, dns.TypeA, false)
	r.Question = append(r.Question, r.Question[0])
	if m := exchangeNet(t, "udp", srv.udp, r); m.Rcode != dns.RcodeFormatError {
		t.Errorf("two questions: %s, want FORMERR", dns.RcodeToString[m.Rcode])
	}
}

func TestServeStopsWhenTheContextEnds(t *testing.T) {
	srv := serve(t, newServer(t, Config{}, tutorial()))
	exchangeNet(t, "udp", srv.udp, query("whereami-cs"+zone, dns.TypeA, false))
	done := make(chan error, 1)
	go func() { done <- srv.stop() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Serve returned %v on shutdown, want nil", err)
		}
	case <-time.After(settle):
		t.Fatalf("Serve did not return %v after its context ended", settle)
	}
	c := &dns.Client{Net: "udp", Timeout: 500 * time.Millisecond}
	if _, _, err := c.Exchange(query("whereami-cs"+zone, dns.TypeA, false), srv.udp); err == nil {
		t.Error("a stopped server still answers")
	}
}

func TestListenAndServeReportsABusyAddress(t *testing.T) {
	s := newServer(t, Config{}, tutorial())
	busy, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	err = s.ListenAndServe(context.Background(), busy.LocalAddr().String())
	if err == nil {
		t.Fatal("ListenAndServe on a taken port succeeded")
	}
}
