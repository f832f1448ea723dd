package wireguard

import (
	"bufio"
	"encoding/hex"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"time"
)

// PeerStatus is the state of one peer as the device reports it.
type PeerStatus struct {
	PublicKey Key
	// Endpoint is the peer's current address: the configured one, or the
	// one learned from its latest authenticated packet. Zero if neither.
	Endpoint netip.AddrPort
	// LastHandshake is zero if no handshake has completed.
	LastHandshake time.Time
	// RxBytes and TxBytes count WireGuard messages including their headers.
	RxBytes, TxBytes uint64
}

// Peers returns the status of each peer, indexed by peer number; a number
// with no peer has the zero PeerStatus. It parses the device's UAPI get
// output, so it is for metrics and status, not for a packet path.
func (t *Transport) Peers() ([]PeerStatus, error) {
	tab := *t.peers.Load()
	out := make([]PeerStatus, len(tab))
	index := make(map[Key]int, len(tab))
	for i, p := range tab {
		if p != nil {
			out[i].PublicKey = p.cfg.PublicKey
			index[p.cfg.PublicKey] = i
		}
	}
	text, err := t.dev.IpcGet()
	if err != nil {
		return nil, fmt.Errorf("wireguard: read device status: %w", err)
	}
	var (
		cur       *PeerStatus
		sec, nsec int64
	)
	flush := func() {
		if cur != nil && (sec != 0 || nsec != 0) {
			cur.LastHandshake = time.Unix(sec, nsec)
		}
		sec, nsec = 0, 0
	}
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		key, value, ok := strings.Cut(sc.Text(), "=")
		if !ok {
			continue
		}
		if key == "public_key" {
			flush()
			cur = nil
			k, err := parseHexKey(value)
			if err != nil {
				return nil, fmt.Errorf("wireguard: read device status: %w", err)
			}
			if i, ok := index[k]; ok {
				cur = &out[i]
			}
			continue
		}
		if cur == nil {
			continue
		}
		switch key {
		case "endpoint":
			// Unparsable endpoints are left zero: status must not fail on
			// a form the device may print for an endpoint we did not set.
			if ap, err := netip.ParseAddrPort(value); err == nil {
				cur.Endpoint = ap
			}
		case "last_handshake_time_sec":
			sec, err = strconv.ParseInt(value, 10, 64)
		case "last_handshake_time_nsec":
			nsec, err = strconv.ParseInt(value, 10, 64)
		case "rx_bytes":
			cur.RxBytes, err = strconv.ParseUint(value, 10, 64)
		case "tx_bytes":
			cur.TxBytes, err = strconv.ParseUint(value, 10, 64)
		}
		if err != nil {
			return nil, fmt.Errorf("wireguard: read device status: %s: %w", key, err)
		}
	}
	flush()
	return out, nil
}

// listenPort reads the port the device bound, which differs from
// Config.Port when that is 0.
func (t *Transport) listenPort() (uint16, error) {
	text, err := t.dev.IpcGet()
	if err != nil {
		return 0, fmt.Errorf("wireguard: read listen port: %w", err)
	}
	for line := range strings.Lines(text) {
		if v, ok := strings.CutPrefix(strings.TrimSuffix(line, "\n"), "listen_port="); ok {
			p, err := strconv.ParseUint(v, 10, 16)
			if err != nil {
				return 0, fmt.Errorf("wireguard: read listen port: %w", err)
			}
			return uint16(p), nil
		}
	}
	return 0, fmt.Errorf("wireguard: read listen port: device reports none")
}

func parseHexKey(s string) (Key, error) {
	var k Key
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != len(k) {
		return k, fmt.Errorf("bad key %q", s)
	}
	copy(k[:], b)
	return k, nil
}
