package lab

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
)

func TestWhereami(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Whereami{Pod: "c2-web-1", Cluster: "c2"}.Serve(ctx, ln) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	}()
	base := "http://" + ln.Addr().String()
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}

	r, err := getWhereami(ctx, client, base+"/")
	if err != nil {
		t.Fatal(err)
	}
	if r.Pod != "c2-web-1" || r.Cluster != "c2" || r.Server != ln.Addr().String() || clientHost(r.Client) != "127.0.0.1" {
		t.Errorf("reply %+v: want pod c2-web-1, cluster c2, server %s, client 127.0.0.1", r, ln.Addr())
	}

	for _, tc := range []struct {
		path   string
		status int
		size   int
	}{
		{"/bytes?n=100000", http.StatusOK, 100000},
		{"/bytes?n=0", http.StatusOK, 0},
		{"/bytes?n=-1", http.StatusBadRequest, -1},
		{"/bytes?n=lots", http.StatusBadRequest, -1},
		{"/bytes?n=99999999999", http.StatusBadRequest, -1},
		{"/elsewhere", http.StatusNotFound, -1},
	} {
		resp, err := client.Get(base + tc.path)
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != tc.status {
			t.Errorf("GET %s: %s, want %d", tc.path, resp.Status, tc.status)
		}
		if tc.size >= 0 && (len(b) != tc.size || strings.Trim(string(b), "\x00") != "") {
			t.Errorf("GET %s: %d bytes, want %d zero bytes", tc.path, len(b), tc.size)
		}
	}
}
