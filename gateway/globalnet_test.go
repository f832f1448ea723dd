package gateway

import (
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/snorkel-net/snorkel/packet"
	"github.com/snorkel-net/snorkel/transport"
)

// mapTranslator stands in for the NAT engine: it rewrites the addresses
// in its maps and refuses anything else, recording what it was asked.
type mapTranslator struct {
	ingress map[netip.Addr]netip.Addr // global destination → local
	egress  map[netip.Addr]netip.Addr // local source → global
	asked   []netip.Addr
}

func (m *mapTranslator) Egress(remote int, b []byte, p *packet.Parsed) bool {
	m.asked = append(m.asked, p.SrcAddr())
	to, ok := m.egress[p.SrcAddr()]
	if ok {
		copy(b[12:16], to.AsSlice())
		copy(p.Src[:4], to.AsSlice())
		fixIPv4Checksum(b)
	}
	return ok
}

func (m *mapTranslator) Ingress(remote int, b []byte, p *packet.Parsed) bool {
	m.asked = append(m.asked, p.DstAddr())
	to, ok := m.ingress[p.DstAddr()]
	if ok {
		copy(b[16:20], to.AsSlice())
		copy(p.Dst[:4], to.AsSlice())
		fixIPv4Checksum(b)
	}
	return ok
}

// fixIPv4Checksum recomputes the header checksum; the fake translator
// leaves the TCP checksum stale, which nothing here checks.
func fixIPv4Checksum(b []byte) {
	binary.BigEndian.PutUint16(b[10:], 0)
	binary.BigEndian.PutUint16(b[10:], ^packet.Checksum(b[:20], 0))
}

func globalnetGateway(t *testing.T, x Translator) (*Gateway, *nullTransport) {
	t.Helper()
	c := globalnetConfig()
	s, err := c.build()
	if err != nil {
		t.Fatal(err)
	}
	g := newGateway(s, Options{Translator: x})
	tr := &nullTransport{keep: true}
	g.attach(tr, "")
	return g, tr
}

func TestGlobalnetIngressChecksGlobalDestinationThenTranslatesThenLocal(t *testing.T) {
	a := netip.MustParseAddr
	x := &mapTranslator{ingress: map[netip.Addr]netip.Addr{
		a("242.1.0.200"): a("10.88.0.10"), // the exported service
		a("242.1.0.201"): a("192.0.2.1"),  // a rule gone wrong: not a local address
	}}
	g, _ := globalnetGateway(t, x)
	dev := &replayDevice{keep: true}
	attachDevice(g, dev)
	off := transport.Headroom
	remote := a("242.2.0.5")
	g.Deliver(0, [][]byte{
		deliverBuf(ipv4TCP(remote, a("242.1.0.200"), 200, false)),        // translated and delivered
		deliverBuf(ipv4TCP(remote, c1Pod, 200, false)),                   // a local pod, untranslated: refused before translation
		deliverBuf(ipv4TCP(a("10.8.3.3"), a("242.1.0.200"), 200, false)), // the remote's pod CIDR is no source with Globalnet
		deliverBuf(ipv4TCP(remote, a("242.1.0.99"), 200, false)),         // no rule: the translator refuses
		deliverBuf(ipv4TCP(remote, a("242.1.0.201"), 200, false)),        // translated to a non-local address
		deliverBuf(ipv4TCP(remote, a("242.2.0.9"), 200, false)),          // the remote's own global CIDR
		deliverBuf(ipv4TCP(remote, a("10.8.0.1"), 200, false)),           // the TUN address, untranslated
		deliverBuf(ipv4TCP(remote, a("242.1.255.255"), 200, false)),      // inside the global CIDR, no rule
	}, off)
	if len(dev.wrote) != 1 {
		t.Fatalf("wrote %d packets to the device, want 1", len(dev.wrote))
	}
	var p packet.Parsed
	if p.Decode(dev.wrote[0]) != packet.DropNone || p.DstAddr() != a("10.88.0.10") {
		t.Errorf("delivered a packet to %v, want the ClusterIP 10.88.0.10", p.DstAddr())
	}
	want := []netip.Addr{a("242.1.0.200"), a("242.1.0.99"), a("242.1.0.201"), a("242.1.255.255")}
	if len(x.asked) != len(want) {
		t.Fatalf("the translator was asked about %v; want only destinations in the global CIDR %v", x.asked, want)
	}
	for i := range want {
		if x.asked[i] != want[i] {
			t.Errorf("translator call %d was for %v, want %v", i, x.asked[i], want[i])
		}
	}
	st := g.Stats()
	drops := st.Remotes[0].Drops
	if drops["bad_destination"] != 4 || drops["spoofed_source"] != 1 || drops["translate"] != 2 {
		t.Errorf("drops %v; want 4 bad_destination (3 outside the global CIDR, 1 translated outside the cluster), 1 spoofed_source, 2 translate", drops)
	}
}

func TestGlobalnetEgressRoutesOnlyGlobalCIDRs(t *testing.T) {
	a := netip.MustParseAddr
	x := &mapTranslator{egress: map[netip.Addr]netip.Addr{c1Pod: a("242.1.0.1")}}
	g, tr := globalnetGateway(t, x)
	dev := &replayDevice{reads: 1, batch: [][]byte{
		ipv4TCP(c1Pod, a("242.2.0.9"), 300, false),         // to c2's global CIDR
		ipv4TCP(c1Pod, a("10.8.2.2"), 300, false),          // c2's pod CIDR (the same as c1's): not routed
		ipv4TCP(a("10.8.9.9"), a("242.2.0.9"), 300, false), // a source the translator refuses
		ipv4TCP(c1Pod, a("242.1.0.7"), 300, false),         // this cluster's own global CIDR
		ipv4TCP(c1Pod, a("242.2.0.9"), 1500, false),        // over the path MTU: answered before translation
		ipv4TCP(c1Pod, a("10.88.0.10"), 300, false),        // c2's service CIDR
	}}
	if err := g.readLoop(dev); err != nil {
		t.Fatal(err)
	}
	if len(tr.sent) != 1 {
		t.Fatalf("sent %d packets, want 1", len(tr.sent))
	}
	var p packet.Parsed
	if p.Decode(tr.sent[0]) != packet.DropNone || p.SrcAddr() != a("242.1.0.1") || p.DstAddr() != a("242.2.0.9") {
		t.Errorf("sent %v → %v, want 242.1.0.1 → 242.2.0.9", p.SrcAddr(), p.DstAddr())
	}
	if len(x.asked) != 2 {
		t.Errorf("the translator was asked about sources %v; want only the two routed packets within the path MTU", x.asked)
	}
	st := g.Stats()
	if st.Unattributed["no_route"] != 3 || st.Remotes[0].Drops["translate"] != 1 || st.Remotes[0].Drops["too_big"] != 1 {
		t.Errorf("drops %v / %v; want 3 no_route, 1 translate, 1 too_big", st.Unattributed, st.Remotes[0].Drops)
	}
}

func TestGlobalnetStatusShowsResolvedAddresses(t *testing.T) {
	g, _ := globalnetGateway(t, &mapTranslator{})
	st := g.Stats().Globalnet
	if st == nil {
		t.Fatal("no Globalnet in /status with Globalnet on")
	}
	if len(st.ClusterEgressIPs) != DefaultClusterEgressIPs || st.ClusterEgressIPs[0] != netip.MustParseAddr("242.1.0.1") {
		t.Errorf("cluster egress %v", st.ClusterEgressIPs)
	}
	if len(st.EgressPools) != 2 || st.EgressPools[1].Kind != PoolKindPodSelector || len(st.Ingress) != 2 || st.Ingress[1].Kind != IngressKindHeadlessPod {
		t.Errorf("pools %+v ingress %+v", st.EgressPools, st.Ingress)
	}
	if st.NAT != nil {
		t.Errorf("NAT counters %+v from a translator that keeps none", st.NAT)
	}
	off, _ := testGateway(t)
	if off.Stats().Globalnet != nil {
		t.Error("Globalnet in /status with Globalnet off")
	}
}
