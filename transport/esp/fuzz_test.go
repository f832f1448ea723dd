package esp

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/snorkel-net/snorkel/transport"
	"github.com/snorkel-net/snorkel/transport/esp/ike"
)

// maxDatagram is the most a receive buffer holds behind rxOffset; the
// socket never delivers more.
const maxDatagram = transport.BufSize - rxOffset

// fuzzSAs are the SA pairs the fuzz targets open under: every suite, with
// and without ESN.
func fuzzSAs(t testing.TB) (outs []*outbound, ins []*inbound) {
	for _, sc := range suiteCases {
		for _, esn := range []bool{false, true} {
			o, in := saPair(t, withESN(sc.tr, esn), 0x1000)
			outs, ins = append(outs, o), append(ins, in)
		}
	}
	return outs, ins
}

// authentic reports whether esp is exactly the packet the holder of o's
// keys seals from payload with sequence number seq and the IV esp carries:
// the only kind of packet that may open.
func authentic(o *outbound, esp, payload []byte, next byte, seq uint64) bool {
	hdr := o.headerLen()
	if len(esp) < hdr {
		return false
	}
	return bytes.Equal(sealWithIV(o, payload, next, seq, esp[espHeaderLen:hdr]), esp)
}

// FuzzOpen opens arbitrary bytes as an ESP packet of one of the SAs (chosen
// by which): it must never panic, and what opens must be exactly a packet
// that the holder of the keys sealed, with the payload it sealed.
func FuzzOpen(f *testing.F) {
	outs, ins := fuzzSAs(f)
	for i, o := range outs {
		f.Add(uint8(i), sealed(f, o, ipv4(ip4A, ip4B, pattern(30, byte(i)))))
		f.Add(uint8(i), sealed(f, o, ipv6(ip6A, ip6B, nil)))
	}
	f.Add(uint8(0), []byte{0, 0, 0x10, 0, 0, 0, 0, 1})
	f.Fuzz(func(t *testing.T, which uint8, esp []byte) {
		if len(esp) > maxDatagram {
			return
		}
		i := int(which) % len(ins)
		in := ins[i]
		in.win.reset(0)
		got, next, r := opened(in, esp)
		if r == accepted {
			if !authentic(outs[i], esp, got, next, in.win.top) {
				t.Fatalf("opened a packet that is not the sealing of its payload:\n% x", esp)
			}
		} else if r == 0 || r >= numReasons {
			t.Fatalf("refused with reason %d", r)
		}
	})
}

// FuzzReceive runs arbitrary datagrams through the receive path's demux:
// it must never panic; each datagram is delivered, given to the IKE
// handler or counted once; keepalives are never delivered; IKE messages
// reach the handler whole; and what is delivered opened from an authentic
// packet and is an IP packet.
func FuzzReceive(f *testing.F) {
	rec := newRecorder(f)
	peerAddr := local(4000)
	tr := onFreePort(f, Config{Peers: []Peer{{Endpoint: peerAddr}}}, rec)
	var ikeMsgs [][]byte
	tr.SetIKEHandler(func(_ netip.AddrPort, m []byte) { ikeMsgs = append(ikeMsgs, bytes.Clone(m)) })
	far := map[uint32]*outbound{}
	for i, tr0 := range []ike.Transform{gcm128, withESN(cbc256, true)} {
		c, _ := childPair(tr0, 0, 0, 0x1000*uint32(i+1))
		if err := tr.InstallChild(c); err != nil {
			f.Fatal(err)
		}
		far[c.InSPI] = mirror(f, c)
	}
	for _, o := range far {
		f.Add(sealed(f, o, ipv4(ip4A, ip4B, pattern(40, 1))))
		f.Add(sealed(f, o, ipv6(ip6A, ip6B, pattern(3, 2))))
	}
	f.Add([]byte{keepaliveByte})
	f.Add([]byte{0, 0, 0, 0, 1, 2, 3})
	f.Add([]byte{0, 0, 0})
	f.Add([]byte{0, 0, 0x10, 1, 0, 0, 0, 1, 2})
	f.Fuzz(func(t *testing.T, d []byte) {
		if len(d) > maxDatagram {
			return
		}
		for _, sa := range *tr.inbound.Load() {
			sa.win.reset(0)
		}
		ikeMsgs = ikeMsgs[:0]
		before := total(tr)
		var dg datagrams
		dg.add(d, peerAddr)
		tr.receive(dg.bufs, dg.sizes, dg.srcs)
		pkts, _ := rec.take()
		// An empty datagram is no datagram: udp.Conn reports it as size 0,
		// which carries nothing.
		if n := uint64(len(pkts)+len(ikeMsgs)) + total(tr) - before; n != uint64(min(len(d), 1)) {
			t.Fatalf("a %d-byte datagram was delivered, handed to IKE or counted %d times", len(d), n)
		}
		if len(d) >= markerLen && binary.BigEndian.Uint32(d) == 0 && (len(ikeMsgs) != 1 || !bytes.Equal(ikeMsgs[0], d[markerLen:])) {
			t.Fatalf("IKE message % x not handed over whole", d)
		}
		if len(pkts) == 0 {
			return
		}
		if len(d) == 1 {
			t.Fatal("a keepalive was delivered")
		}
		spi := binary.BigEndian.Uint32(d)
		sa := (*tr.inbound.Load())[spi]
		next := nextHeaderOf(pkts[0], 0)
		if !innerIP(pkts[0], next) || !authentic(far[spi], d, pkts[0], next, sa.win.top) {
			t.Fatalf("delivered %d bytes from a packet that is not the sealing of them:\n% x", len(pkts[0]), d)
		}
	})
}

// total is the sum of every drop counter.
func total(tr *Transport) uint64 {
	var n uint64
	for _, d := range tr.Drops() {
		n += d.Count
	}
	return n
}
