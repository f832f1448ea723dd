package packet

import (
	"bytes"
	"testing"
)

func TestICMPInner(t *testing.T) {
	orig := v4{src: "10.0.0.1", dst: "10.1.0.2", proto: ProtoTCP}.build(tcp(40000, 443, TCPFlagACK, nil, payload))
	orig6 := v6{src: "fd00::1", dst: "fd01::2", next: ProtoUDP}.build(udp(1, 2, 1, payload))
	ext := []byte{0x20, 0, 0, 0, 0, 8, 1, 1} // an RFC 4884 extension after the quote
	quote128 := append(clone(orig), make([]byte, 128-len(orig))...)
	tests := []struct {
		name   string
		b      []byte
		want   []byte
		wantOK bool
	}{
		{"ICMP time exceeded quotes the datagram",
			v4{src: "10.9.9.9", dst: "10.0.0.1", proto: ProtoICMPv4}.build(icmp(ICMPv4TimeExceeded, 0, 0, orig[:28])), orig[:28], true},
		{"ICMP fragmentation needed quotes the datagram",
			v4{src: "10.9.9.9", dst: "10.0.0.1", proto: ProtoICMPv4}.build(icmp(ICMPv4Unreachable, ICMPv4FragNeededCode, 1400, orig)), orig, true},
		{"ICMP error with an RFC 4884 length excludes the extension",
			v4{src: "10.9.9.9", dst: "10.0.0.1", proto: ProtoICMPv4}.build(icmp(ICMPv4Unreachable, 1, 32<<16, cat(quote128, ext))), quote128, true},
		{"ICMP error with an RFC 4884 length past the end quotes to the end",
			v4{src: "10.9.9.9", dst: "10.0.0.1", proto: ProtoICMPv4}.build(icmp(ICMPv4Unreachable, 1, 255<<16, orig)), orig, true},
		{"ICMPv6 packet too big quotes the packet",
			v6{src: "fd09::9", dst: "fd00::1", next: ProtoICMPv6}.build(icmp(ICMPv6PacketTooBig, 0, 1280, orig6)), orig6, true},
		{"ICMPv6 unreachable with an RFC 4884 length excludes the extension",
			v6{src: "fd09::9", dst: "fd00::1", next: ProtoICMPv6}.build(icmp(ICMPv6Unreachable, 0, 16<<24, cat(append(clone(orig6), make([]byte, 128-len(orig6))...), ext))),
			append(clone(orig6), make([]byte, 128-len(orig6))...), true},
		{"ICMP echo is not an error",
			v4{src: "10.9.9.9", dst: "10.0.0.1", proto: ProtoICMPv4}.build(icmp(ICMPv4EchoRequest, 0, 0, orig)), nil, false},
		{"ICMPv6 echo is not an error",
			v6{src: "fd09::9", dst: "fd00::1", next: ProtoICMPv6}.build(icmp(ICMPv6EchoRequest, 0, 0, orig6)), nil, false},
		{"TCP is not an error", orig, nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var p Parsed
			if r := p.Decode(tt.b); r != DropNone {
				t.Fatal(r)
			}
			inner, ok := ICMPInner(tt.b, &p)
			if ok != tt.wantOK || !bytes.Equal(inner, tt.want) {
				t.Errorf("ICMPInner = %x, %v, want %x, %v", inner, ok, tt.want, tt.wantOK)
			}
		})
	}
}

// The NAT of an ICMP error, as the NAT engine will do it: rewrite the outer
// destination and the quoted packet's source, then recompute the outer ICMP
// checksum, which covers the quote.
func TestTranslateICMPErrorThroughItsQuote(t *testing.T) {
	tests := []struct {
		name              string
		outer             func(quote []byte) []byte
		orig              []byte
		global, local     [16]byte
		globalPort, lport uint16
	}{
		{
			name: "ICMP fragmentation needed quoting 8 bytes of TCP",
			outer: func(q []byte) []byte {
				return v4{src: "10.9.9.9", dst: "242.0.0.1", proto: ProtoICMPv4}.build(icmp(ICMPv4Unreachable, ICMPv4FragNeededCode, 1400, q[:28]))
			},
			orig:   v4{src: "242.0.0.1", dst: "10.1.0.2", proto: ProtoTCP}.build(tcp(61000, 443, TCPFlagACK, nil, payload)),
			global: addr16("242.0.0.1"), local: addr16("10.0.0.1"), globalPort: 61000, lport: 40000,
		},
		{
			name: "ICMPv6 time exceeded quoting a whole UDP datagram",
			outer: func(q []byte) []byte {
				return v6{src: "fd09::9", dst: "fd42::1", next: ProtoICMPv6}.build(icmp(ICMPv6TimeExceeded, 0, 0, q))
			},
			orig:   v6{src: "fd42::1", dst: "fd01::2", next: ProtoUDP}.build(udp(61000, 53, 1, payload)),
			global: addr16("fd42::1"), local: addr16("fd00::1"), globalPort: 61000, lport: 40000,
		},
		{
			name: "ICMP time exceeded quoting an echo request",
			outer: func(q []byte) []byte {
				return v4{src: "10.9.9.9", dst: "242.0.0.1", proto: ProtoICMPv4}.build(icmp(ICMPv4TimeExceeded, 0, 0, q))
			},
			orig:   v4{src: "242.0.0.1", dst: "10.1.0.2", proto: ProtoICMPv4}.build(icmp(ICMPv4EchoRequest, 0, 61000<<16|1, payload)),
			global: addr16("242.0.0.1"), local: addr16("10.0.0.1"), globalPort: 61000, lport: 40000,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := tt.outer(tt.orig)
			var p, ip Parsed
			if r := p.Decode(b); r != DropNone {
				t.Fatal(r)
			}
			inner, ok := ICMPInner(b, &p)
			if !ok {
				t.Fatal("ICMPInner = false")
			}
			if r := ip.DecodeInner(inner); r != DropNone {
				t.Fatal(r)
			}
			if ip.Src != tt.global || ip.SrcPort != tt.globalPort {
				t.Fatalf("inner source %v:%d, want the global address and port", ip.SrcAddr(), ip.SrcPort)
			}
			SetDstAddr(b, &p, tt.local)
			SetSrcAddr(inner, &ip, tt.local)
			SetSrcPort(inner, &ip, tt.lport)
			if !RecomputeL4Checksum(b, &p) {
				t.Fatal("RecomputeL4Checksum = false")
			}
			checkChecksums(t, b)

			// The quote must now read as the packet the local host sent.
			want := clone(tt.orig)
			var wp Parsed
			wp.Decode(want)
			SetSrcAddr(want, &wp, tt.local)
			SetSrcPort(want, &wp, tt.lport)
			if !bytes.Equal(inner, want[:len(inner)]) {
				t.Errorf("translated quote\n%x\nwant\n%x", inner, want[:len(inner)])
			}
		})
	}
}
