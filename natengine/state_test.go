package natengine

import (
	"testing"

	"github.com/snorkel-net/snorkel/packet"
)

// TestSteadyAgreesWithAdvance holds steady, the shortcut of the established
// path, to advance over every state word, protocol, direction and set of TCP
// flags: whenever steady says a packet changes nothing, advance must agree.
// It also checks that the packets of established flows take the shortcut.
func TestSteadyAgreesWithAdvance(t *testing.T) {
	for st := range uint32(1 << 7) {
		for _, proto := range []uint8{protoTCP, protoUDP, protoICMPv4, protoICMPv6, 47} {
			for _, reply := range []bool{false, true} {
				for flags := range 256 {
					if steady(st, proto, reply, uint8(flags)) && advance(st, proto, reply, uint8(flags)) != st {
						t.Fatalf("steady(%#x, %d, reply %v, flags %#x) = true, but advance gives %#x", st, proto, reply, flags, advance(st, proto, reply, uint8(flags)))
					}
				}
			}
		}
	}
	established := uint32(StateEstablished) | stReplied
	replied := uint32(StateReplied) | stReplied
	for _, tt := range []struct {
		name  string
		st    uint32
		proto uint8
		reply bool
		flags uint8
	}{
		{"TCP established, ACK out", established, protoTCP, false, packet.TCPFlagACK},
		{"TCP established, PSH ACK back", established, protoTCP, true, packet.TCPFlagACK | packet.TCPFlagPSH},
		{"UDP replied, out", replied, protoUDP, false, 0},
		{"UDP replied, back", replied, protoUDP, true, 0},
		{"UDP unreplied, out", uint32(StateUnreplied), protoUDP, false, 0},
	} {
		if !steady(tt.st, tt.proto, tt.reply, tt.flags) {
			t.Errorf("%s: steady = false, want the shortcut", tt.name)
		}
	}
}

// TestFlowMatchesItsOwnKeysOnly holds matchesEgress and matchesIngress,
// which the lock-free lookup inlines, to flow.key: a flow matches its key in
// each direction, and no key that differs from it in one field.
func TestFlowMatchesItsOwnKeysOnly(t *testing.T) {
	flows := []flow{
		{local: a16("10.0.0.7"), global: a16("242.1.0.3"), remote: a16("242.2.0.9"), lport: 40000, gport: 40001, rport: 443, proto: protoTCP},
		{local: a16("fd00::7"), global: a16("fd42:1::1"), remote: a16("fd42:2::9"), lport: 53, gport: 53, rport: 5353, proto: protoUDP, kind: kindV6 | kindInbound},
		{local: a16("10.0.0.7"), global: a16("242.1.0.3"), remote: a16("242.2.0.9"), lport: 7, gport: 9, proto: protoICMPv4, kind: kindEcho},
	}
	for i := range flows {
		f := &flows[i]
		for dir := uint32(0); dir < 2; dir++ {
			k := f.key(dir)
			if !f.matches(dir, &k) {
				t.Errorf("flow %d does not match its own key %+v in direction %d", i, k, dir)
			}
			if f.matches(1-dir, &k) && f.key(1-dir) != k {
				t.Errorf("flow %d matches its direction-%d key %+v in the other direction", i, dir, k)
			}
			for j, change := range []func(*key){
				func(k *key) { k.a[3]++ }, func(k *key) { k.a[15]++ },
				func(k *key) { k.b[0]++ }, func(k *key) { k.b[9]++ },
				func(k *key) { k.ap++ }, func(k *key) { k.bp++ },
				func(k *key) { k.proto++ }, func(k *key) { k.v6 = !k.v6 },
			} {
				c := k
				change(&c)
				if f.matches(dir, &c) {
					t.Errorf("flow %d matches key %+v, its direction-%d key with field %d changed", i, c, dir, j)
				}
			}
		}
	}
}
