package wireguard

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"

	"golang.zx2c4.com/wireguard/ipc"
)

// uapiDir is where wg(8) looks for userspace implementations' sockets.
const uapiDir = "/var/run/wireguard"

// serveUAPI serves the WireGuard configuration protocol on the socket that
// `wg show name` connects to.
func (t *Transport) serveUAPI(name string, log *slog.Logger) error {
	path := filepath.Join(uapiDir, name+".sock")
	f, err := ipc.UAPIOpen(name)
	if err != nil {
		return fmt.Errorf("wireguard: open UAPI socket for %q: %w", name, err)
	}
	l, err := ipc.UAPIListen(name, f)
	f.Close()
	if err != nil {
		os.Remove(path)
		return fmt.Errorf("wireguard: listen on UAPI socket for %q: %w", name, err)
	}
	t.uapi = l
	t.uapiPath = path
	t.uapiDone = make(chan struct{})
	go func() {
		defer close(t.uapiDone)
		for {
			c, err := l.Accept()
			if err != nil {
				// The listener also fails this way when its socket file
				// is deleted, which leaves `wg` unable to reach us.
				if !t.uapiClosing.Load() {
					log.Warn("UAPI socket stopped", "path", t.uapiPath, "err", err)
				}
				return
			}
			go t.dev.IpcHandle(c)
		}
	}()
	return nil
}

// closeUAPI stops serving the UAPI socket and removes its file.
func (t *Transport) closeUAPI() error {
	if t.uapi == nil {
		return nil
	}
	t.uapiClosing.Store(true)
	err := t.uapi.Close()
	<-t.uapiDone
	if rerr := os.Remove(t.uapiPath); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) && err == nil {
		err = rerr
	}
	if err != nil {
		return fmt.Errorf("wireguard: close UAPI socket: %w", err)
	}
	return nil
}
