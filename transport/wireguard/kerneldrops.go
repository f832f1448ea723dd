package wireguard

import (
	"bufio"
	"bytes"
	"os"
	"strconv"
	"sync"
)

// kernelDrops follows the kernel's drop counts of the UDP sockets bound to
// the device's port (transport.KernelDropReason). wireguard-go's bind owns
// those sockets, so they are read from /proc/net/udp and /proc/net/udp6, of
// the network namespace the gateway runs in, rather than asked.
type kernelDrops struct {
	mu    sync.Mutex
	total uint64            // every drop counted so far, widened past 32 bits
	last  map[uint64]uint32 // the count each listed socket had when last read, by inode
}

// procUDP lists the UDP sockets of the network namespace, one file a family.
var procUDP = []string{"/proc/net/udp", "/proc/net/udp6"}

// read returns the drops so far on the sockets bound to port. A socket that
// rebinding replaced keeps what it counted; a count that wraps past 2^32
// is followed if read at least once per 2^32 drops. Where the files cannot
// be read it counts nothing more.
func (k *kernelDrops) read(port uint16) uint64 {
	k.mu.Lock()
	defer k.mu.Unlock()
	seen := make(map[uint64]uint32, 2)
	for _, name := range procUDP {
		b, err := os.ReadFile(name)
		if err != nil {
			continue
		}
		for inode, drops := range socketsOn(b, port) {
			k.total += uint64(drops - k.last[inode])
			seen[inode] = drops
		}
	}
	k.last = seen
	return k.total
}

// socketsOn yields the inode and drop count of each socket in a
// /proc/net/udp listing b whose local port is port. The listing's columns:
// sl, local_address (address:port in hex), rem_address, st,
// tx_queue:rx_queue, tr:tm->when, retrnsmt, uid, timeout, inode, ref,
// pointer, drops.
func socketsOn(b []byte, port uint16) map[uint64]uint32 {
	out := make(map[uint64]uint32)
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := bytes.Fields(sc.Bytes())
		if len(f) < 13 {
			continue
		}
		i := bytes.LastIndexByte(f[1], ':')
		if i < 0 {
			continue
		}
		p, err := strconv.ParseUint(string(f[1][i+1:]), 16, 16)
		if err != nil || uint16(p) != port {
			continue
		}
		inode, err1 := strconv.ParseUint(string(f[9]), 10, 64)
		drops, err2 := strconv.ParseUint(string(f[12]), 10, 32)
		if err1 != nil || err2 != nil {
			continue
		}
		out[inode] = uint32(drops)
	}
	return out
}
