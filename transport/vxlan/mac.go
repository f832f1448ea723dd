package vxlan

import (
	"fmt"
	"hash/fnv"
	"net"
	"os"
	"strconv"
)

// mac is an Ethernet address held by value so that the hot path copies it
// without touching the heap.
type mac [6]byte

var broadcast = mac{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}

func (m mac) isUnicast() bool { return m[0]&0x01 == 0 && m != mac{} }

// pack returns m in the low 48 bits with bit 48 set, so that zero means
// "nothing learned" in an atomic.Uint64.
func (m mac) pack() uint64 {
	return 1<<48 | uint64(m[0])<<40 | uint64(m[1])<<32 | uint64(m[2])<<24 |
		uint64(m[3])<<16 | uint64(m[4])<<8 | uint64(m[5])
}

func unpack(v uint64) mac {
	return mac{byte(v >> 40), byte(v >> 32), byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}
}

func (m mac) String() string { return net.HardwareAddr(m[:]).String() }

// parseMAC checks a configured address: six bytes, unicast, not zero.
func parseMAC(field string, hw net.HardwareAddr) (mac, error) {
	var m mac
	if len(hw) != len(m) {
		return m, fmt.Errorf("vxlan: %s %q: want a 6-byte Ethernet address", field, hw.String())
	}
	copy(m[:], hw)
	if !m.isUnicast() {
		return m, fmt.Errorf("vxlan: %s %v: must be a unicast, non-zero address (clear the low bit of the first octet)", field, m)
	}
	return m, nil
}

// derivedMAC is the local MAC used when none is configured: a hash of the
// endpoint's name, VNI and port, so that it survives restarts (kernel peers keep
// their neighbour entries) and differs between gateways on different hosts.
// The locally administered bit is set and the multicast bit cleared
// (IEEE 802 U/L and I/G bits).
func derivedMAC(host string, vni uint32, port uint16) mac {
	h := fnv.New64a()
	h.Write([]byte(host))
	h.Write([]byte{0})
	h.Write(strconv.AppendUint(nil, uint64(vni), 10))
	h.Write([]byte{0})
	h.Write(strconv.AppendUint(nil, uint64(port), 10))
	s := h.Sum64()
	m := unpack(s)
	m[0] = m[0]&^0x01 | 0x02
	return m
}

func hostname() string {
	h, err := os.Hostname()
	if err != nil {
		return ""
	}
	return h
}
