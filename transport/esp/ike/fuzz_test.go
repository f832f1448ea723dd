package ike

import (
	"bytes"
	"reflect"
	"testing"
)

// FuzzParseMessage checks the message parser on arbitrary datagrams: it
// never panics, a message it accepts encodes to one that parses back the
// same, and an SK payload never opens under keys it was not sealed with.
func FuzzParseMessage(f *testing.F) {
	f.Add((&message{spiI: 1, exchange: exchIKESAInit, flags: flagInitiator, payloads: everyPayload()}).encode())
	s := ikeSuite{encr: EncrAESGCM16, keyBits: 128}
	c, _ := newSKCipher(s, bytes.Repeat([]byte{3}, 20), nil)
	f.Add(sealMessage(&message{spiI: 1, spiR: 2, exchange: exchIKEAuth, id: 1}, everyPayload(), c))
	f.Add(withHeader(200, []byte{0, 0x80, 0, 4}))
	f.Add(withHeader(payloadSK, []byte{payloadNonce, 0, 0, 4}))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := parseMessage(b)
		if err != nil {
			return
		}
		again := m.encode()
		m2, err := parseMessage(again)
		if err != nil {
			t.Fatalf("a re-encoded message does not parse: %v\n% x", err, again)
		}
		if !reflect.DeepEqual(m, m2) {
			t.Fatalf("round trip\n got %+v\nwant %+v", m2, m)
		}
		if _, ok := first[*skPayload](m.payloads); ok {
			for _, k := range fuzzCiphers(t) {
				if err := openSK(b, m, k); err == nil {
					t.Fatal("an SK payload opened under keys it was not sealed with")
				}
			}
		}
	})
}

// FuzzParsePayloads checks the payload chain parser, which also reads the
// plaintext of SK payloads: it never panics, an accepted chain round-trips,
// and sealed in an SK payload it opens to the same payloads.
func FuzzParsePayloads(f *testing.F) {
	body := appendPayloads(nil, everyPayload())
	f.Add(uint8(payloadNotify), body)
	f.Add(uint8(payloadSA), body[:40])
	f.Add(uint8(payloadTSi), []byte{0, 0, 0, 12, 1, 0, 0, 0, 9, 0, 0, 4})
	f.Fuzz(func(t *testing.T, next uint8, chain []byte) {
		ps, err := parsePayloads(next, chain)
		if err != nil {
			return
		}
		if _, sk := first[*skPayload](ps); sk {
			return // the outer form, covered by FuzzParseMessage
		}
		again := appendPayloads(nil, ps)
		ps2, err := parsePayloads(firstKind(ps), again)
		if err != nil || !reflect.DeepEqual(ps, ps2) {
			t.Fatalf("round trip: %v\n got %+v\nwant %+v", err, ps2, ps)
		}
		for _, s := range []ikeSuite{{encr: EncrAESGCM16, keyBits: 256}, {encr: EncrAESCBC, keyBits: 128, integ: IntegHMACSHA256_128}} {
			k := deriveIKEKeys(s, []byte{1}, []byte{2}, []byte{3}, 4, 5)
			seal, _ := newSKCipher(s, k.ei, k.ai)
			open, _ := newSKCipher(s, k.ei, k.ai)
			b := sealMessage(&message{spiI: 4, spiR: 5, exchange: exchInformational}, ps, seal)
			m, err := parseMessage(b)
			if err != nil {
				t.Fatalf("a sealed message does not parse: %v", err)
			}
			if err := openSK(b, m, open); err != nil || !reflect.DeepEqual(m.payloads, ps) {
				t.Fatalf("%v: sealed payloads open to %+v, %v", s, m.payloads, err)
			}
		}
	})
}

func fuzzCiphers(t *testing.T) []skCipher {
	var out []skCipher
	for _, s := range []ikeSuite{{encr: EncrAESGCM16, keyBits: 128}, {encr: EncrAESCBC, keyBits: 256, integ: IntegHMACSHA256_128}} {
		k := deriveIKEKeys(s, []byte{9}, []byte{8}, []byte{7}, 6, 5)
		c, err := newSKCipher(s, k.ei, k.ai)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, c)
	}
	return out
}
