package topo

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// netnsDir is where iproute2 keeps named namespaces.
const netnsDir = "/run/netns"

// NS is one named network namespace of a Topology.
type NS struct {
	name string
	topo *Topology

	mu     sync.Mutex
	handle netns.NsHandle // -1 until opened
	nl     *netlink.Handle
}

// Name returns the namespace's full name, as `ip netns` lists it.
func (n *NS) Name() string { return n.name }

// String returns the full name.
func (n *NS) String() string { return n.name }

// create makes the namespace with iproute2, which also makes /run/netns a
// shared mount so that `ip netns exec` children (which get a private mount
// namespace) do not pin the namespace after it is deleted.
func (n *NS) create() error {
	if out, err := exec.Command("ip", "netns", "add", n.name).CombinedOutput(); err != nil {
		return fmt.Errorf("topo: ip netns add %s: %w: %s", n.name, err, strings.TrimSpace(string(out)))
	}
	if err := n.open(); err != nil {
		return err
	}
	return n.LinkUp("lo")
}

// open gets a handle on an existing namespace.
func (n *NS) open() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.nl != nil {
		return nil
	}
	h, err := netns.GetFromName(n.name)
	if err != nil {
		return fmt.Errorf("topo: open namespace %s: %w", n.name, err)
	}
	nl, err := netlink.NewHandleAt(h)
	if err != nil {
		h.Close()
		return fmt.Errorf("topo: netlink in %s: %w", n.name, err)
	}
	n.handle, n.nl = h, nl
	return nil
}

func (n *NS) netlink() (*netlink.Handle, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.nl == nil {
		return nil, fmt.Errorf("topo: namespace %s is not open", n.name)
	}
	return n.nl, nil
}

// release closes the handle on the namespace, if open.
func (n *NS) release() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.nl != nil {
		n.nl.Close()
		n.handle.Close()
		n.nl = nil
	}
}

func (n *NS) delete() error {
	n.release()
	if !Exists(n.name) {
		return nil
	}
	if out, err := exec.Command("ip", "netns", "delete", n.name).CombinedOutput(); err != nil {
		return fmt.Errorf("topo: ip netns delete %s: %w: %s", n.name, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// Exists reports whether a namespace of that full name exists.
func Exists(name string) bool {
	_, err := os.Stat(filepath.Join(netnsDir, name))
	return err == nil
}

// List returns the full names of all existing namespaces starting with
// prefix.
func List(prefix string) ([]string, error) {
	ents, err := os.ReadDir(netnsDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("topo: list namespaces: %w", err)
	}
	var out []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), prefix) {
			out = append(out, e.Name())
		}
	}
	return out, nil
}

// Do runs f on an OS thread that is inside the namespace. Sockets f creates
// stay in the namespace after Do returns and can be used from any goroutine.
// f must not start goroutines that expect to be in the namespace, and must
// not resolve host names (the resolver dials from other threads).
func (n *NS) Do(f func() error) error {
	n.mu.Lock()
	h := n.handle
	open := n.nl != nil
	n.mu.Unlock()
	if !open {
		return fmt.Errorf("topo: namespace %s is not open", n.name)
	}
	// A fresh goroutine, so that if the thread cannot be switched back it
	// stays locked and the runtime discards it when the goroutine ends,
	// rather than leaving the caller on a thread in the wrong namespace.
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			errc <- fmt.Errorf("topo: current namespace: %w", err)
			return
		}
		defer orig.Close()
		if err := netns.Set(h); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("topo: enter %s: %w", n.name, err)
			return
		}
		ferr := f()
		if err := netns.Set(orig); err == nil {
			runtime.UnlockOSThread()
		}
		errc <- ferr
	}()
	return <-errc
}

// DialContext dials addr from inside the namespace. addr must hold an IP
// address, not a host name.
func (n *NS) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	var c net.Conn
	err := n.Do(func() error {
		var err error
		var d net.Dialer
		c, err = d.DialContext(ctx, network, addr)
		return err
	})
	return c, err
}

// Listen listens on addr inside the namespace.
func (n *NS) Listen(network, addr string) (net.Listener, error) {
	var l net.Listener
	err := n.Do(func() error {
		var err error
		l, err = net.Listen(network, addr)
		return err
	})
	return l, err
}

// ListenPacket opens a packet socket on addr inside the namespace.
func (n *NS) ListenPacket(network, addr string) (net.PacketConn, error) {
	var c net.PacketConn
	err := n.Do(func() error {
		var err error
		c, err = net.ListenPacket(network, addr)
		return err
	})
	return c, err
}

// HTTPClient returns a client whose connections start inside the namespace.
// Keep-alives are off so that every request is a new connection, as a load
// balancer test needs.
func (n *NS) HTTPClient() *http.Client {
	return &http.Client{Transport: &http.Transport{
		DialContext:       n.DialContext,
		DisableKeepAlives: true,
	}}
}

// Sysctl sets a sysctl inside the namespace; key is dotted, as sysctl(8)
// takes it ("net.ipv4.ip_forward").
func (n *NS) Sysctl(key, value string) error {
	path := filepath.Join("/proc/sys", strings.ReplaceAll(key, ".", "/"))
	return n.Do(func() error {
		// /proc/sys/net resolves against the opening thread's namespace.
		if err := os.WriteFile(path, []byte(value), 0o644); err != nil {
			return fmt.Errorf("topo: sysctl %s=%s in %s: %w", key, value, n.name, err)
		}
		return nil
	})
}
