package vxlan

import (
	"bytes"
	"testing"

	"github.com/snorkel-net/snorkel/transport"
)

// FuzzDecode checks the decapsulation parser on arbitrary datagrams: it
// never panics, an accepted IP packet lies inside the datagram, encapsulating
// that packet again gives the same datagram (reserved bits and padding
// aside), and an answered ARP request decodes as ARP from the local MAC.
func FuzzDecode(f *testing.F) {
	f.Add(refFrame(1000, macB, macA, etherTypeIPv4, ipv4(ip4A, ip4B, 17, pattern(10, 1))))
	f.Add(refFrame(1000, macB, macA, etherTypeIPv6, ipv6(ip6A, ip6B, 58, pattern(10, 2))))
	f.Add(refFrame(1000, broadcast, macA, etherTypeARP, arpPacket(arpRequest, macA, ip4A, mac{}, ip4B)))
	f.Add(refFrame(1001, macB, macA, 0x8100, nil))
	f.Add([]byte{0x08})
	f.Fuzz(func(t *testing.T, frame []byte) {
		d := decode(frame, 1000)
		switch d.kind {
		case frameIP:
			if d.ipLen <= 0 || headerLen+d.ipLen > len(frame) {
				t.Fatalf("ipLen %d outside a %d-byte datagram", d.ipLen, len(frame))
			}
			pkt := frame[headerLen : headerLen+d.ipLen]
			b := withHeadroom(pkt)
			dst := mac(frame[vxlanLen : vxlanLen+6])
			again, ok := encap(b, transport.Headroom, 1000, dst, d.src)
			if !ok {
				t.Fatal("an accepted packet is refused by encap")
			}
			want := bytes.Clone(frame[:headerLen+d.ipLen])
			want[0], want[1], want[2], want[3], want[7] = flagI, 0, 0, 0, 0
			if !bytes.Equal(again, want) {
				t.Fatalf("round trip\n got % x\nwant % x", again, want)
			}
			if d2 := decode(again, 1000); d2 != d {
				t.Fatalf("decode after round trip %+v, want %+v", d2, d)
			}
		case frameARP:
			local := mac{0x02, 1, 2, 3, 4, 5}
			reply, r := answerARP(bytes.Clone(frame), 1000, local)
			if r != accepted {
				return
			}
			if d2 := decode(reply, 1000); d2.kind != frameARP || d2.src != local {
				t.Fatalf("ARP reply decodes as %+v", d2)
			}
		case frameDrop:
			if d.reason == accepted {
				t.Fatal("dropped without a reason")
			}
		}
	})
}
