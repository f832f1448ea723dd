package packet

import (
	"encoding/binary"
	"testing"
)

func TestClampMSS(t *testing.T) {
	mss := func(v uint16) []byte { return []byte{tcpOptMSS, tcpOptMSSLen, byte(v >> 8), byte(v)} }
	nop, eol := []byte{tcpOptNOP}, []byte{tcpOptEOL}
	syn4 := func(flags uint8, opts []byte) []byte {
		for len(opts)%4 != 0 {
			opts = append(opts, tcpOptEOL)
		}
		return v4{src: "10.0.0.1", dst: "10.1.0.2", proto: ProtoTCP}.build(tcp(40000, 443, flags, opts, payload))
	}
	tests := []struct {
		name        string
		b           []byte
		clamp       uint16
		wantChanged bool
		wantMSS     uint16 // after clamping; 0 when MSS reports none
	}{
		{"SYN MSS above the limit is lowered", syn4(TCPFlagSYN, mss(1460)), 1360, true, 1360},
		{"SYN-ACK MSS above the limit is lowered", syn4(TCPFlagSYN|TCPFlagACK, mss(1460)), 1360, true, 1360},
		{"SYN MSS at the limit is kept", syn4(TCPFlagSYN, mss(1360)), 1360, false, 1360},
		{"SYN MSS below the limit is kept", syn4(TCPFlagSYN, mss(536)), 1360, false, 536},
		{"MSS at an odd offset is lowered with a correct checksum", syn4(TCPFlagSYN, cat(nop, mss(1460))), 1200, true, 1200},
		{"MSS after other options is lowered", syn4(TCPFlagSYN, cat(nop, nop, []byte{8, 10, 1, 2, 3, 4, 5, 6, 7, 8}, nop, []byte{3, 3, 7}, mss(9000))), 1400, true, 1400},
		{"every MSS option is lowered", syn4(TCPFlagSYN, cat(mss(1460), nop, mss(65535))), 1300, true, 1300},
		{"ACK without SYN is left alone", syn4(TCPFlagACK, mss(1460)), 1360, false, 0},
		{"SYN without MSS is left alone", syn4(TCPFlagSYN, cat(nop, nop, nop, nop)), 1360, false, 0},
		{"MSS after end of options is ignored", syn4(TCPFlagSYN, cat(eol, mss(1460))), 1360, false, 0},
		{"option with length 0 stops parsing", syn4(TCPFlagSYN, cat([]byte{8, 0}, mss(1460))), 1360, false, 0},
		{"option running past the header stops parsing", syn4(TCPFlagSYN, cat(mss(1460), []byte{8, 200})), 1360, true, 1360},
		{"MSS option of the wrong length is ignored", syn4(TCPFlagSYN, []byte{tcpOptMSS, 3, 0xff, 1}), 1360, false, 0},
		{"MSS cut by the end of the header is ignored", syn4(TCPFlagSYN, cat(nop, nop, []byte{tcpOptMSS, tcpOptMSSLen})), 1360, false, 0},
		{"IPv6 SYN MSS is lowered", v6{src: "fd00::1", dst: "fd01::2", next: ProtoTCP}.build(tcp(1, 2, TCPFlagSYN, cat(mss(1440), nop, nop, nop, nop), nil)), 1220, true, 1220},
		{"non-first fragment is left alone", v4{src: "10.0.0.1", dst: "10.1.0.2", proto: ProtoTCP, frag: 2}.build(tcp(1, 2, TCPFlagSYN, mss(1460), nil)), 1360, false, 0},
		{"UDP is left alone", v4{src: "10.0.0.1", dst: "10.1.0.2", proto: ProtoUDP}.build(udp(1, 2, 1, tcp(1, 2, TCPFlagSYN, mss(1460), nil))), 1360, false, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := clone(tt.b)
			var p Parsed
			if r := p.Decode(b); r != DropNone {
				t.Fatal(r)
			}
			if got := ClampMSS(b, &p, tt.clamp); got != tt.wantChanged {
				t.Errorf("ClampMSS = %v, want %v", got, tt.wantChanged)
			}
			got, ok := MSS(b, &p)
			if ok != (tt.wantMSS != 0) || got != tt.wantMSS {
				t.Errorf("MSS after clamp = %d, %v, want %d", got, ok, tt.wantMSS)
			}
			checkChecksums(t, b)
			if !tt.wantChanged && string(b) != string(tt.b) {
				t.Errorf("ClampMSS changed the packet but reported no change")
			}
		})
	}
}

func TestClampMSSAllocatesNothing(t *testing.T) {
	b := v4{src: "10.0.0.1", dst: "10.1.0.2", proto: ProtoTCP}.build(tcp(40000, 443, TCPFlagSYN, []byte{2, 4, 5, 0xb4}, nil))
	var p Parsed
	p.Decode(b)
	allocs := testing.AllocsPerRun(100, func() {
		binary.BigEndian.PutUint16(b[p.IPHeaderLen+22:], 1460)
		ClampMSS(b, &p, 1360)
	})
	if allocs != 0 {
		t.Errorf("%v allocations per ClampMSS, want 0", allocs)
	}
}
