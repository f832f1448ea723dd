package lab

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"
)

// Whereami is the lab's pod server, after the Submariner tutorial's
// whereami: it answers GET / with which pod and cluster it is and the
// client address it saw, and GET /bytes?n=N with N bytes, for transfers
// larger than one packet.
type Whereami struct {
	Pod     string
	Cluster string
}

// WhereamiReply is the JSON body of GET /.
type WhereamiReply struct {
	Pod     string `json:"pod"`
	Cluster string `json:"cluster"`
	// Server is the local address of the connection: the pod's address,
	// also when the client dialled a ClusterIP.
	Server string `json:"server"`
	// Client is the remote address of the connection as the pod saw it.
	Client string `json:"client"`
}

// MaxBytes bounds GET /bytes.
const MaxBytes = 1 << 30

func (w Whereami) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/":
		var server string
		if a, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
			server = a.String()
		}
		rw.Header().Set("Content-Type", "application/json")
		json.NewEncoder(rw).Encode(WhereamiReply{Pod: w.Pod, Cluster: w.Cluster, Server: server, Client: r.RemoteAddr})
	case "/bytes":
		n, err := strconv.Atoi(r.URL.Query().Get("n"))
		if err != nil || n < 0 || n > MaxBytes {
			http.Error(rw, fmt.Sprintf("n must be a byte count from 0 to %d", MaxBytes), http.StatusBadRequest)
			return
		}
		rw.Header().Set("Content-Type", "application/octet-stream")
		rw.Header().Set("Content-Length", strconv.Itoa(n))
		io.CopyN(rw, zeros{}, int64(n))
	default:
		http.NotFound(rw, r)
	}
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// Serve serves whereami on ln until ctx is done.
func (w Whereami) Serve(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{Handler: w, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		shut, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		srv.Shutdown(shut)
	}()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("whereami: %w", err)
	}
	return nil
}
