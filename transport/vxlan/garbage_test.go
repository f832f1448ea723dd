package vxlan

import (
	"net"
	"net/netip"
	"testing"

	"github.com/snorkel-net/snorkel/transport"
	"github.com/snorkel-net/snorkel/transport/internal/transporttest"
	"github.com/snorkel-net/snorkel/transport/udp/udptest"
)

// TestGarbageIsCountedExactly sends malformed datagrams from a stranger and
// from the peer's address and expects each counted once, under its reason
// and against its sender; genuine traffic must then still cross without a
// drop.
func TestGarbageIsCountedExactly(t *testing.T) {
	ports := udptest.FreePorts(t, 2)
	recA, recB := newRecorder(t), newRecorder(t)
	a, err := New(Config{Port: ports[0], VNI: 4242, Peers: []Peer{{Endpoint: local(ports[1])}}}, recA)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := New(Config{Port: ports[1], VNI: 4242, Peers: []Peer{{Endpoint: local(ports[0])}}}, recB)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()

	// VXLAN has no authentication: any socket on the peer's address
	// speaks for it (RFC 7348 §7).
	impostor, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer impostor.Close()
	stranger, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 2)})
	if err != nil {
		t.Skipf("no second loopback address: %v", err)
	}
	defer stranger.Close()

	v4 := ipv4(ip4A, ip4B, 17, pattern(20, 9))
	good := refFrame(4242, b.cfg.mac, macA, etherTypeIPv4, v4)
	noFlag := refFrame(4242, b.cfg.mac, macA, etherTypeIPv4, v4)
	noFlag[0] = 0
	v6InV4 := refFrame(4242, b.cfg.mac, macA, etherTypeIPv4, ipv6(ip6A, ip6B, 17, pattern(20, 1)))
	kinds := []struct {
		name   string
		frame  []byte
		reason string
	}{
		{"one byte", []byte{flagI}, "short"},
		{"VXLAN header only", good[:vxlanLen], "short"},
		{"I flag clear", noFlag, "bad_header"},
		{"other VNI", refFrame(4243, b.cfg.mac, macA, etherTypeIPv4, v4), "bad_vni"},
		{"LLDP", refFrame(4242, b.cfg.mac, macA, 0x88cc, v4), "unsupported_ethertype"},
		{"VLAN tag", refFrame(4242, b.cfg.mac, macA, 0x8100, v4), "unsupported_ethertype"},
		{"IPv4 header cut", refFrame(4242, b.cfg.mac, macA, etherTypeIPv4, v4[:19]), "short"},
		{"IPv4 length past the frame", refFrame(4242, b.cfg.mac, macA, etherTypeIPv4, v4[:len(v4)-1]), "bad_ip"},
		{"IPv6 under the IPv4 EtherType", v6InV4, "bad_ip"},
		{"ARP cut", refFrame(4242, broadcast, macA, etherTypeARP, arpPacket(arpRequest, macA, ip4A, mac{}, ip4B)[:20]), "short"},
		{"ARP reply", refFrame(4242, broadcast, macA, etherTypeARP, arpPacket(arpReply, macA, ip4A, macB, ip4B)), "arp_ignored"},
	}
	to := &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: int(ports[1])}
	want := make(map[transport.Drop]uint64)
	sent := 0
	const each = 3
	for _, k := range kinds {
		for range each {
			if _, err := impostor.WriteToUDP(k.frame, to); err != nil {
				t.Fatal(err)
			}
			want[transport.Drop{Peer: 0, Reason: k.reason}]++
			if _, err := stranger.WriteToUDP(k.frame, to); err != nil {
				t.Fatal(err)
			}
			want[transport.Drop{Peer: transport.PeerAny, Reason: "unknown_peer"}]++
			sent += 2
		}
	}

	transporttest.WaitForDrops(t, b, uint64(sent), settle)
	checkDrops := func(when string) {
		t.Helper()
		for _, d := range transporttest.DropsDiff(b.Drops(), want) {
			t.Errorf("%s: B counts %s", when, d)
		}
	}
	checkDrops("after the garbage")

	if err := a.Send(0, [][]byte{withHeadroom(v4)}, transport.Headroom); err != nil {
		t.Fatal(err)
	}
	recB.wait(t, 1)
	if err := b.Send(0, [][]byte{withHeadroom(v4)}, transport.Headroom); err != nil {
		t.Fatal(err)
	}
	recA.wait(t, 1)
	checkDrops("after genuine traffic")
	if d := a.Drops(); len(d) != 0 {
		t.Errorf("A dropped %v", d)
	}
}

// An empty datagram carries no VXLAN header, so it is short; the bind
// reports it with a zero size and no sender.
func TestEmptyDatagramIsCountedShort(t *testing.T) {
	ports := udptest.FreePorts(t, 2)
	tr, err := New(Config{Port: ports[0], VNI: 7, Peers: []Peer{{Endpoint: local(ports[1])}}}, newRecorder(t))
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	tr.receive([][]byte{socketBuf(nil)}, []int{0}, []netip.AddrPort{{}})
	if got := tr.Drops(); len(got) != 1 || got[0] != (transport.Drop{Peer: transport.PeerAny, Reason: "short", Count: 1}) {
		t.Errorf("Drops() = %v, want one short drop from an unknown sender", got)
	}
}
