package udptest

import (
	"net"
	"testing"
)

func TestFreePortsAreDistinctFreeAndBelowEphemeral(t *testing.T) {
	ports := FreePorts(t, 8)
	seen := map[uint16]bool{}
	for _, p := range ports {
		if p < low || p >= high {
			t.Errorf("port %d is outside %d-%d", p, low, high-1)
		}
		if seen[p] {
			t.Errorf("port %d given twice", p)
		}
		seen[p] = true
		u, err := net.ListenUDP("udp", &net.UDPAddr{Port: int(p)})
		if err != nil {
			t.Errorf("UDP port %d is not free: %v", p, err)
			continue
		}
		u.Close()
	}
}

func TestFreeSeesABoundPort(t *testing.T) {
	u, err := net.ListenUDP("udp", &net.UDPAddr{Port: int(FreePort(t))})
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	if free(uint16(u.LocalAddr().(*net.UDPAddr).Port)) {
		t.Error("a port bound for UDP is reported free")
	}
	l, err := net.ListenTCP("tcp", &net.TCPAddr{Port: int(FreePort(t))})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if free(uint16(l.Addr().(*net.TCPAddr).Port)) {
		t.Error("a port bound for TCP is reported free")
	}
}
