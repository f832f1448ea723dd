package lab

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
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

// TestFetchBytes checks that a fetch with Bytes also takes that many bytes
// from the server, and fails when fewer arrive.
func TestFetchBytes(t *testing.T) {
	w := Whereami{Pod: "c2-web-1", Cluster: "c2"}
	short := http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/bytes" {
			io.WriteString(rw, "only this")
			return
		}
		w.ServeHTTP(rw, r)
	})
	for _, tc := range []struct {
		name    string
		handler http.Handler
		wantErr string
	}{
		{"the whole transfer arrives", w, ""},
		{"a short transfer fails the check", short, "9 bytes arrived, want 3000"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(tc.handler)
			defer srv.Close()
			line, err := Fetch{URL: srv.URL + "/", Cluster: "c2", Bytes: 3000}.Run(t.Context(), srv.Client())
			switch {
			case tc.wantErr == "" && (err != nil || !strings.HasSuffix(line, "; 3000 bytes arrived")):
				t.Errorf("Run = %q, %v; want a line ending in the 3000 bytes", line, err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("Run = %q, %v; want an error with %q", line, err, tc.wantErr)
			}
		})
	}
}
