package vxlan

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"time"

	"github.com/snorkel-net/snorkel/packet"
	"github.com/snorkel-net/snorkel/transport"
)

// settle bounds a real-time wait for something that takes milliseconds on
// an idle machine (datagrams over loopback or a veth, an ip command): go
// test runs packages in parallel, and on a loaded 2-core machine such waits
// stretch by orders of magnitude. Running out fails the test, so it is far
// beyond the normal time.
const settle = 60 * time.Second

// refFrame is the slow reference encoder: a VXLAN datagram built field by
// field with append, as RFC 7348 §5 draws it.
func refFrame(vni uint32, dst, src mac, etherType uint16, payload []byte) []byte {
	var f []byte
	f = append(f, flagI, 0, 0, 0)
	f = append(f, byte(vni>>16), byte(vni>>8), byte(vni), 0)
	f = append(f, dst[:]...)
	f = append(f, src[:]...)
	f = binary.BigEndian.AppendUint16(f, etherType)
	return append(f, payload...)
}

func checksum(b []byte) uint16 { return ^packet.Checksum(b, 0) }

// ipv4 builds an IPv4 packet with a valid header checksum.
func ipv4(src, dst netip.Addr, proto byte, payload []byte) []byte {
	p := make([]byte, 20, 20+len(payload))
	p[0] = 0x45
	binary.BigEndian.PutUint16(p[2:], uint16(20+len(payload)))
	p[8] = 64
	p[9] = proto
	s, d := src.As4(), dst.As4()
	copy(p[12:], s[:])
	copy(p[16:], d[:])
	binary.BigEndian.PutUint16(p[10:], checksum(p[:20]))
	return append(p, payload...)
}

// ipv6 builds an IPv6 packet.
func ipv6(src, dst netip.Addr, next byte, payload []byte) []byte {
	p := make([]byte, 40, 40+len(payload))
	p[0] = 0x60
	binary.BigEndian.PutUint16(p[4:], uint16(len(payload)))
	p[6] = next
	p[7] = 64
	s, d := src.As16(), dst.As16()
	copy(p[8:], s[:])
	copy(p[24:], d[:])
	return append(p, payload...)
}

// icmpEcho builds an ICMPv4 echo message of type typ (8 request, 0 reply).
func icmpEcho(typ byte, id, seq uint16, data []byte) []byte {
	m := make([]byte, 8, 8+len(data))
	m[0] = typ
	binary.BigEndian.PutUint16(m[4:], id)
	binary.BigEndian.PutUint16(m[6:], seq)
	m = append(m, data...)
	binary.BigEndian.PutUint16(m[2:], checksum(m))
	return m
}

// arpPacket builds an Ethernet/IPv4 ARP packet (RFC 826).
func arpPacket(op uint16, sha mac, spa netip.Addr, tha mac, tpa netip.Addr) []byte {
	a := []byte{0, 1, 0x08, 0x00, 6, 4}
	a = binary.BigEndian.AppendUint16(a, op)
	a = append(a, sha[:]...)
	a = append(a, spa.AsSlice()...)
	a = append(a, tha[:]...)
	return append(a, tpa.AsSlice()...)
}

// withHeadroom copies pkt into a gateway-style buffer: Headroom bytes before
// it and BufSize capacity.
func withHeadroom(pkt []byte) []byte {
	b := make([]byte, transport.Headroom+len(pkt), transport.BufSize)
	copy(b[transport.Headroom:], pkt)
	return b
}

// socketBuf places a received datagram where udp.Conn would: at rxOffset in
// a whole buffer.
func socketBuf(frame []byte) []byte {
	b := make([]byte, transport.BufSize)
	copy(b[rxOffset:], frame)
	return b
}

func pattern(n int, seed byte) []byte {
	return bytes.Repeat([]byte{seed, seed + 1, seed + 2}, n/3+1)[:n]
}
