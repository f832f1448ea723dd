package main

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/miekg/dns"

	"github.com/snorkel-net/snorkel/lab"
)

func TestLabPodFetch(t *testing.T) {
	srv := httptest.NewServer(lab.Whereami{Pod: "server-0", Cluster: "b"})
	defer srv.Close()
	for _, tc := range []struct {
		name    string
		args    []string
		wantErr string
	}{
		{"answer from the expected cluster and pod passes", []string{"--expect-cluster", "b", "--expect-pod", "server-0"}, ""},
		{"client address in the expected CIDR passes", []string{"--expect-client-in", "127.0.0.0/8"}, ""},
		{"client address equal to the expected one passes", []string{"--expect-client-in", "127.0.0.1"}, ""},
		{"another client address fails", []string{"--expect-client-in", "127.0.0.2"}, "want an address in 127.0.0.2/32"},
		{"another cluster fails naming both", []string{"--expect-cluster", "a"}, `answered from cluster "b", want "a"`},
		{"another pod fails naming both", []string{"--expect-pod", "server-1"}, `answered from pod "server-0", want "server-1"`},
		{"client outside the CIDR fails naming the address", []string{"--expect-client-in", "10.0.0.0/8"}, "saw the client as 127.0.0.1, want an address in 10.0.0.0/8"},
		{"a bad CIDR names the flag", []string{"--expect-client-in", "nonsense"}, "--expect-client-in"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			err := runFetch(context.Background(), append([]string{srv.URL + "/"}, tc.args...), srv.Client(), &out)
			checkProbe(t, out.String(), err, tc.wantErr, "answered from pod server-0 in cluster b")
		})
	}
}

func TestLabPodFetchRetriesUntilTheServerAnswers(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) < 2 {
			http.Error(w, "not yet", http.StatusServiceUnavailable)
			return
		}
		lab.Whereami{Pod: "server-0", Cluster: "b"}.ServeHTTP(w, r)
	}))
	defer srv.Close()
	var out bytes.Buffer
	if err := runFetch(context.Background(), []string{srv.URL + "/", "--retry-until", "10s"}, srv.Client(), &out); err != nil {
		t.Fatalf("fetch: %v", err)
	}
	if n := calls.Load(); n != 2 {
		t.Errorf("%d requests, want 2", n)
	}
	err := runFetch(context.Background(), []string{srv.URL + "/", "--expect-cluster", "a"}, srv.Client(), &out)
	if n := calls.Load(); err == nil || n != 3 {
		t.Errorf("without --retry-until: %v after %d requests, want a failure after 3", err, n)
	}
}

func TestLabPodResolve(t *testing.T) {
	resolver := dnsStub(t, map[string][]string{
		"svc.ns.svc.clusterset.local.": {"10.96.0.10"},
		"two.ns.svc.clusterset.local.": {"242.1.0.5", "10.2.0.7"},
	})
	for _, tc := range []struct {
		name    string
		args    []string
		wantErr string
	}{
		{"the expected address passes", []string{"svc.ns.svc.clusterset.local", "--expect", "10.96.0.10"}, ""},
		{"an address in the expected CIDR passes", []string{"svc.ns.svc.clusterset.local", "--expect-in", "10.96.0.0/12"}, ""},
		{"another address fails naming both", []string{"svc.ns.svc.clusterset.local", "--expect", "10.96.0.11"}, "resolved to 10.96.0.10, want 10.96.0.11"},
		{"one address outside the CIDR fails", []string{"two.ns.svc.clusterset.local", "--expect-in", "242.1.0.0/16"}, "resolved to 242.1.0.5,10.2.0.7, want addresses in 242.1.0.0/16"},
		{"an unknown name fails", []string{"none.ns.svc.clusterset.local"}, "no such host"},
		{"a bad address names the flag", []string{"svc.ns.svc.clusterset.local", "--expect", "ten"}, "--expect"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			err := runResolve(context.Background(), tc.args, resolver, &out)
			checkProbe(t, out.String(), err, tc.wantErr, "resolved to")
		})
	}
}

func checkProbe(t *testing.T, out string, err error, wantErr, wantOut string) {
	t.Helper()
	switch {
	case wantErr == "" && err != nil:
		t.Fatalf("failed: %v", err)
	case wantErr == "" && (!strings.Contains(out, wantOut) || strings.Count(out, "\n") != 1):
		t.Errorf("printed %q, want one line with %q", out, wantOut)
	case wantErr != "" && (err == nil || !strings.Contains(err.Error(), wantErr)):
		t.Errorf("error %v, want one with %q", err, wantErr)
	}
}

// dnsStub serves names' A records on a local UDP port and returns a
// resolver that asks it only.
func dnsStub(t *testing.T, names map[string][]string) *net.Resolver {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, q *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(q)
		addrs, ok := names[q.Question[0].Name]
		if !ok {
			m.Rcode = dns.RcodeNameError
		}
		if q.Question[0].Qtype == dns.TypeA {
			for _, a := range addrs {
				m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: q.Question[0].Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 5}, A: net.ParseIP(a)})
			}
		}
		w.WriteMsg(m)
	})}
	go srv.ActivateAndServe()
	t.Cleanup(func() { srv.Shutdown() })
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "udp", pc.LocalAddr().String())
	}}
}

func TestLabPodTCPConnect(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	open := ln.Addr().String()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	// A port nothing listens on: one taken and given back.
	spare, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := spare.Addr().String()
	spare.Close()
	defer ln.Close()

	var out bytes.Buffer
	if err := runProbe(context.Background(), "tcp-connect", []string{open}, &out); err != nil || out.String() != "connected to "+open+"\n" {
		t.Errorf("an open port: %v, printed %q", err, out.String())
	}
	out.Reset()
	if err := runProbe(context.Background(), "tcp-connect", []string{closed, "--count=2"}, &out); err == nil || !strings.Contains(err.Error(), "tcp-connect: dial tcp "+closed) {
		t.Errorf("a closed port: %v, want a tcp-connect error naming %s", err, closed)
	}
	if err := runProbe(context.Background(), "tcp-connect", []string{"nonsense"}, &out); err == nil || !strings.Contains(err.Error(), "tcp-connect:") {
		t.Errorf("a bad address: %v, want a tcp-connect error", err)
	}
}
