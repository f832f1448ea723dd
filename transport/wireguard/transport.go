package wireguard

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"

	"github.com/snorkel-net/snorkel/transport"
	"golang.zx2c4.com/wireguard/conn"
	"golang.zx2c4.com/wireguard/device"
)

// Underlay bytes added to each inner packet: the outer IP and UDP headers and
// WireGuard's 16-byte data header and 16-byte Poly1305 tag.
const (
	overheadIPv4 = 20 + 8 + 32
	overheadIPv6 = 40 + 8 + 32
)

// defaultName names the pipe when Config.UAPIName is empty; the device only
// uses it in log lines.
const defaultName = "snorkel-wg"

// Transport is a WireGuard tunnel to a set of peers that may change while it
// runs (SetPeer, RemovePeer).
type Transport struct {
	dev    *device.Device
	pipe   *pipe
	drops  *dropCounters
	kernel kernelDrops
	filter *filter
	sink   *logSink
	log    *slog.Logger
	self   Key
	port   uint16

	// mu serialises changes of the peers and what follows them: the
	// device's configuration, the peer table, the filter's endpoints.
	mu     sync.Mutex
	closed bool // under mu
	// peers is indexed by peer number, nil where there is none. Send loads
	// it without locking; it is replaced whole under mu.
	peers    atomic.Pointer[[]*peer]
	overhead atomic.Int32

	uapi     net.Listener
	uapiPath string
	uapiDone chan struct{}
	// uapiClosing tells the accept loop that its listener fails because
	// Close closed it.
	uapiClosing atomic.Bool
	// stopWatch ends the goroutine that follows the peers' endpoints;
	// watchDone is closed when it has.
	stopWatch chan struct{}
	watchDone chan struct{}
	closeOnce sync.Once
	closeErr  error
}

var (
	_ transport.Transport   = (*Transport)(nil)
	_ transport.DropCounter = (*Transport)(nil)
)

// New starts a WireGuard device configured by cfg that passes what it
// receives to d. If the listen port is taken the error satisfies
// errors.Is(err, syscall.EADDRINUSE).
func New(cfg Config, d transport.Deliverer) (*Transport, error) {
	if d == nil {
		return nil, errors.New("wireguard: New: Deliverer is nil")
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.MTU == 0 {
		cfg.MTU = DefaultMTU
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	name := cfg.UAPIName
	if name == "" {
		name = defaultName
	}
	log = log.With("transport", "wireguard", "device", name)

	t := &Transport{
		drops: newDropCounters(len(cfg.Peers)),
		log:   log,
		self:  cfg.PrivateKey.Public(),
	}
	t.sink = &logSink{log: log, drops: t.drops, handshook: make(chan struct{}, 1)}
	t.pipe = newPipe(name, cfg.MTU, d, t.drops)
	t.filter = newFilter(t.self, t.drops)
	bind := &filterBind{Bind: conn.NewDefaultBind(), f: t.filter}
	t.dev = device.NewDevice(t.pipe, bind, t.sink.deviceLogger())

	// The device is down while it is configured, so listen_port only records
	// the port and Up opens the socket.
	if err := t.dev.IpcSet(cfg.deviceUAPI()); err != nil {
		t.dev.Close()
		return nil, fmt.Errorf("wireguard: configure device: %w", err)
	}
	tab := make([]*peer, len(cfg.Peers))
	for i, p := range cfg.Peers {
		dp := t.dev.LookupPeer(device.NoisePublicKey(p.PublicKey))
		if dp == nil {
			t.dev.Close()
			return nil, fmt.Errorf("wireguard: configure device: Peers[%d] was not created", i)
		}
		tab[i] = &peer{cfg: clonePeer(p), dev: dp}
	}
	t.install(tab)

	if err := t.dev.Up(); err != nil {
		t.dev.Close()
		return nil, fmt.Errorf("wireguard: listen on UDP port %d: %w", cfg.Port, err)
	}
	port, err := t.listenPort()
	if err != nil {
		t.dev.Close()
		return nil, err
	}
	t.port = port
	t.watchEndpoints()

	if cfg.UAPIName != "" {
		if err := t.serveUAPI(cfg.UAPIName, log); err != nil {
			t.Close()
			return nil, err
		}
	}
	return t, nil
}

// Send hands the batch to the device and returns once the device has copied
// the packets. The device chooses each packet's peer by its destination among
// the peers' AllowedIPs, so peer is only checked to be one the transport
// has; a packet to no peer's AllowedIPs is dropped by the device.
func (t *Transport) Send(peer int, bufs [][]byte, offset int) error {
	if peerAt(*t.peers.Load(), peer) == nil {
		return fmt.Errorf("wireguard: send to peer %d: no such peer", peer)
	}
	if len(bufs) == 0 {
		return nil
	}
	return t.pipe.send(bufs, offset)
}

// Overhead is 60 bytes, or 80 if any current peer's endpoint is IPv6.
func (t *Transport) Overhead() int { return int(t.overhead.Load()) }

// BatchSize is the device's batch: the number of datagrams it sends and
// receives per system call.
func (t *Transport) BatchSize() int { return t.pipe.BatchSize() }

// Port is the UDP port the device listens on.
func (t *Transport) Port() uint16 { return t.port }

// Drops reports the non-zero drop counters, the kernel's discards at the
// port's sockets last (transport.KernelDropReason).
func (t *Transport) Drops() []transport.Drop {
	out := t.drops.snapshot()
	if n := t.kernel.read(t.port); n != 0 {
		out = append(out, transport.Drop{Peer: transport.PeerAny, Reason: transport.KernelDropReason, Count: n})
	}
	return out
}

// Close stops the device and the UAPI socket and removes the socket file.
func (t *Transport) Close() error {
	t.closeOnce.Do(func() {
		t.mu.Lock()
		t.closed = true
		t.mu.Unlock()
		t.closeErr = t.closeUAPI()
		close(t.stopWatch)
		<-t.watchDone
		t.dev.Close()
	})
	return t.closeErr
}

// watchEndpoints keeps the filter's endpoint map, by which it names the peer
// a dropped datagram came from, in step with the device: install reads the
// endpoints when the peers change, and this goroutine again after each
// handshake, when the device moves a peer's endpoint to the handshake's
// source (WireGuard paper §6.5). A peer that roams by transport messages
// alone is named after its next handshake.
func (t *Transport) watchEndpoints() {
	t.stopWatch = make(chan struct{})
	t.watchDone = make(chan struct{})
	go func() {
		defer close(t.watchDone)
		for {
			select {
			case <-t.sink.handshook:
				t.mu.Lock()
				t.readEndpoints()
				t.mu.Unlock()
			case <-t.stopWatch:
				return
			}
		}
	}()
}

// readEndpoints gives the filter the device's current endpoints. The caller
// holds mu, so that a read from before a change of the peers cannot be
// stored after the read that follows it.
func (t *Transport) readEndpoints() {
	st, err := t.Peers()
	if err != nil {
		t.log.Warn("cannot read peer endpoints; drops are not attributed to peers", "err", err)
		return
	}
	eps := make([]netip.AddrPort, len(st))
	for i, s := range st {
		eps[i] = s.Endpoint
	}
	t.filter.setEndpoints(eps)
}
