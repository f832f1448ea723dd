package ike

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net/netip"
	"reflect"
	"testing"
)

// everyPayload is a message body with one of each payload type the codec
// reads, in a plausible order.
func everyPayload() []payload {
	return []payload{
		&notifyPayload{typ: notifyCookie, data: []byte{1, 2, 3, 4, 5, 6, 7, 8}},
		&saPayload{proposals: []proposal{
			{num: 1, protocol: protoESP, spi: []byte{0xc0, 0xff, 0xee, 0x01}, transforms: []transform{
				{typ: transEncr, id: EncrAESGCM16, attrs: []attribute{{typ: attrKeyLength, tv: true, value: []byte{1, 0}}}},
				{typ: transESN, id: esnNo},
			}},
			{num: 2, protocol: protoIKE, transforms: []transform{
				{typ: transEncr, id: EncrAESCBC, attrs: []attribute{{typ: 0x1234, value: []byte("tlv")}}},
				{typ: transPRF, id: prfHMACSHA256},
				{typ: transInteg, id: IntegHMACSHA256_128},
				{typ: transDH, id: dhECP256},
			}},
		}},
		&kePayload{group: dhX25519, data: bytes.Repeat([]byte{0xab}, 32)},
		&noncePayload{data: bytes.Repeat([]byte{0x11}, 32)},
		&idPayload{id: identity{typ: idFQDN, data: []byte("a.test")}},
		&idPayload{responder: true, id: identity{typ: idIPv4Addr, data: []byte{192, 0, 2, 2}}},
		&authPayload{method: authSharedKeyMIC, data: bytes.Repeat([]byte{0x22}, 32)},
		&tsPayload{selectors: []selector{
			{endPort: 65535, start: netip.MustParseAddr("10.1.0.0"), end: netip.MustParseAddr("10.1.255.255")},
			{proto: 6, startPort: 443, endPort: 443, start: netip.MustParseAddr("10.9.0.1"), end: netip.MustParseAddr("10.9.0.1")},
		}},
		&tsPayload{responder: true, selectors: []selector{
			{endPort: 65535, start: netip.MustParseAddr("fd00::"), end: netip.MustParseAddr("fd00::ffff")},
		}},
		&deletePayload{protocol: protoESP, spiSize: 4, spis: [][]byte{{1, 2, 3, 4}, {5, 6, 7, 8}}},
		&deletePayload{protocol: protoIKE},
		&notifyPayload{protocol: protoESP, spi: []byte{9, 9, 9, 9}, typ: notifyRekeySA},
		&opaquePayload{typ: payloadVendorID, body: []byte("vendor")},
		&opaquePayload{typ: payloadCP, body: []byte{1, 0, 0, 0}},
	}
}

func TestMessageRoundTrip(t *testing.T) {
	m := &message{spiI: 0x0102030405060708, spiR: 0x1112131415161718, exchange: exchIKEAuth,
		flags: flagInitiator | flagResponse, id: 0x01020304, payloads: everyPayload()}
	b := m.encode()
	if b[17] != 0x20 || b[16] != payloadNotify || binary.BigEndian.Uint32(b[24:]) != uint32(len(b)) {
		t.Fatalf("header % x: want version 2.0, first payload Notify, the length of the message", b[:headerLen])
	}
	got, err := parseMessage(b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, m) {
		t.Fatalf("round trip\n got %+v\nwant %+v", got, m)
	}
}

// TestPayloadEncodingMatchesRFCLayout checks a few payloads against bytes
// laid out by hand from RFC 7296 §3.
func TestPayloadEncodingMatchesRFCLayout(t *testing.T) {
	tests := []struct {
		name string
		p    payload
		want []byte
	}{
		{"KE: group, reserved, data", &kePayload{group: 31, data: []byte{0xaa, 0xbb}},
			[]byte{0, 0, 0, 10, 0, 31, 0, 0, 0xaa, 0xbb}},
		{"Notify with SPI: protocol, SPI size, type, SPI, data", &notifyPayload{protocol: 3, spi: []byte{1, 2, 3, 4}, typ: 16393},
			[]byte{0, 0, 0, 12, 3, 4, 0x40, 0x09, 1, 2, 3, 4}},
		{"Delete: protocol, SPI size, count, SPIs", &deletePayload{protocol: 3, spiSize: 4, spis: [][]byte{{1, 2, 3, 4}}},
			[]byte{0, 0, 0, 12, 3, 4, 0, 1, 1, 2, 3, 4}},
		{"IDi FQDN", &idPayload{id: identity{typ: idFQDN, data: []byte("ab")}},
			[]byte{0, 0, 0, 10, 2, 0, 0, 0, 'a', 'b'}},
		{"TS IPv4 range", &tsPayload{selectors: []selector{{endPort: 65535, start: netip.MustParseAddr("10.0.0.0"), end: netip.MustParseAddr("10.0.0.255")}}},
			[]byte{0, 0, 0, 24, 1, 0, 0, 0, 7, 0, 0, 16, 0, 0, 0xff, 0xff, 10, 0, 0, 0, 10, 0, 0, 255}},
		{"SA: proposal and transform with Key Length", &saPayload{proposals: []proposal{{num: 1, protocol: protoESP, spi: []byte{1, 2, 3, 4},
			transforms: []transform{{typ: transEncr, id: 20, attrs: []attribute{{typ: attrKeyLength, tv: true, value: []byte{0, 128}}}}}}}},
			[]byte{0, 0, 0, 28, 0, 0, 0, 24, 1, 3, 4, 1, 1, 2, 3, 4, 0, 0, 0, 12, 1, 0, 0, 20, 0x80, 14, 0, 128}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := appendPayloads(nil, []payload{tt.p}); !bytes.Equal(got, tt.want) {
				t.Fatalf("\n got % x\nwant % x", got, tt.want)
			}
		})
	}
}

// withHeader prefixes a payload chain whose first type is next with an IKE
// header of the right length.
func withHeader(next uint8, chain []byte) []byte {
	m := &message{spiI: 1, exchange: exchIKESAInit, flags: flagInitiator}
	b := m.appendHeader(nil, next, headerLen+len(chain))
	return append(b, chain...)
}

func TestParseRefusesMalformedMessages(t *testing.T) {
	valid := (&message{spiI: 1, exchange: exchIKESAInit, payloads: everyPayload()}).encode()
	mutate := func(f func(b []byte) []byte) []byte { return f(bytes.Clone(valid)) }
	nonce8 := appendPayloads(nil, []payload{&noncePayload{data: make([]byte, 16)}})
	nonce8[3] = 12
	tests := []struct {
		name string
		b    []byte
	}{
		{"shorter than the header", valid[:20]},
		{"major version 3", mutate(func(b []byte) []byte { b[17] = 0x30; return b })},
		{"header length beyond the datagram", mutate(func(b []byte) []byte { b[27]++; return b })},
		{"datagram beyond the header length", append(bytes.Clone(valid), 0)},
		{"payload length under 4", withHeader(payloadNonce, []byte{0, 0, 0, 3})},
		{"payload length beyond the message", withHeader(payloadNonce, []byte{0, 0, 0, 40, 1, 2, 3})},
		{"bytes after the last payload", withHeader(payloadVendorID, []byte{0, 0, 0, 4, 9, 9})},
		{"SK payload followed by another", withHeader(payloadSK, []byte{payloadNonce, 0, 0, 4, 0, 0, 0, 4})},
		{"nonce of 8 bytes", withHeader(payloadNonce, nonce8)},
		{"proposal announces 2 transforms and holds 1", withHeader(payloadSA, []byte{0, 0, 0, 20,
			0, 0, 0, 16, 1, 1, 0, 2, 0, 0, 0, 8, 1, 0, 0, 20})},
		{"proposal Last Substruc 2 on the last proposal", withHeader(payloadSA, []byte{0, 0, 0, 20,
			2, 0, 0, 16, 1, 1, 0, 1, 0, 0, 0, 8, 1, 0, 0, 20})},
		{"proposal SPI size beyond the proposal", withHeader(payloadSA, []byte{0, 0, 0, 12, 0, 0, 0, 8, 1, 3, 9, 0})},
		{"transform attribute overruns the transform", withHeader(payloadSA, []byte{0, 0, 0, 24,
			0, 0, 0, 20, 1, 1, 0, 1, 0, 0, 0, 12, 1, 0, 0, 20, 0, 14, 0, 9})},
		{"SA without proposals", withHeader(payloadSA, []byte{0, 0, 0, 4})},
		{"Delete counting 2 SPIs with 1", withHeader(payloadDelete, []byte{0, 0, 0, 12, 3, 4, 0, 2, 1, 2, 3, 4})},
		{"Notify SPI beyond the payload", withHeader(payloadNotify, []byte{0, 0, 0, 8, 3, 4, 0x40, 0x09})},
		{"TS selector of the wrong length", withHeader(payloadTSi, []byte{0, 0, 0, 20, 1, 0, 0, 0, 7, 0, 0, 12, 0, 0, 0xff, 0xff, 10, 0, 0, 0})},
		{"TS counting more selectors than it holds", withHeader(payloadTSi, []byte{0, 0, 0, 8, 2, 0, 0, 0})},
		{"KE without its group", withHeader(payloadKE, []byte{0, 0, 0, 6, 0, 31})},
		{"ID without data", withHeader(payloadIDi, []byte{0, 0, 0, 8, 2, 0, 0, 0})},
		{"AUTH without data", withHeader(payloadAuth, []byte{0, 0, 0, 8, 2, 0, 0, 0})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := parseMessage(tt.b); !errors.Is(err, errMalformed) {
				t.Fatalf("err = %v, want errMalformed", err)
			}
		})
	}
}

func TestUnknownPayloadsByCriticalBit(t *testing.T) {
	// An unknown type 200 before a Nonce: skipped when not critical,
	// refused naming the type when critical (RFC 7296 §2.5).
	chain := append([]byte{payloadNonce, 0, 0, 6, 0xde, 0xad}, appendPayloads(nil, []payload{&noncePayload{data: make([]byte, 16)}})...)
	m, err := parseMessage(withHeader(200, chain))
	if err != nil || len(m.payloads) != 1 {
		t.Fatalf("non-critical unknown payload: %v, %d payloads; want it skipped", err, len(m.payloads))
	}
	chain[1] = 0x80
	m, err = parseMessage(withHeader(200, chain))
	typ, ok := unsupportedCritical(err)
	if !ok || typ != 200 || m == nil || m.exchange != exchIKESAInit {
		t.Fatalf("critical unknown payload: %v (type %d), message %v; want type 200 refused with the header kept", err, typ, m)
	}
	// The critical bit means nothing on a type the codec knows.
	if _, err := parseMessage(withHeader(payloadNonce, append([]byte{0, 0x80}, appendPayloads(nil, []payload{&noncePayload{data: make([]byte, 16)}})[2:]...))); err != nil {
		t.Fatalf("critical bit on a Nonce: %v", err)
	}
}

func TestSKRoundTripAndTampering(t *testing.T) {
	suites := []ikeSuite{
		{encr: EncrAESGCM16, keyBits: 128}, {encr: EncrAESGCM16, keyBits: 256},
		{encr: EncrAESCBC, keyBits: 128, integ: IntegHMACSHA256_128}, {encr: EncrAESCBC, keyBits: 256, integ: IntegHMACSHA256_128},
	}
	for _, s := range suites {
		t.Run(s.String(), func(t *testing.T) {
			k := deriveIKEKeys(s, bytes.Repeat([]byte{1}, 32), make([]byte, 16), make([]byte, 16), 1, 2)
			seal, err := newSKCipher(s, k.ei, k.ai)
			if err != nil {
				t.Fatal(err)
			}
			m := &message{spiI: 1, spiR: 2, exchange: exchIKEAuth, flags: flagInitiator, id: 1}
			inner := everyPayload()
			b := sealMessage(m, inner, seal)
			if binary.BigEndian.Uint32(b[24:]) != uint32(len(b)) || b[16] != payloadSK {
				t.Fatal("header length or first payload wrong")
			}
			if again := sealMessage(m, inner, seal); bytes.Equal(again, b) {
				t.Fatal("two seals of one message are equal: the IV repeats")
			}
			open := func(b []byte) error {
				dec, err := newSKCipher(s, k.ei, k.ai)
				if err != nil {
					t.Fatal(err)
				}
				got, err := parseMessage(b)
				if err != nil {
					return err
				}
				if err := openSK(b, got, dec); err != nil {
					return err
				}
				if !reflect.DeepEqual(got.payloads, inner) {
					t.Fatalf("payloads after open differ\n got %+v\nwant %+v", got.payloads, inner)
				}
				return nil
			}
			if err := open(b); err != nil {
				t.Fatal(err)
			}
			for _, at := range []struct {
				name string
				i    int
			}{{"header", 19}, {"SK payload header", headerLen + 1}, {"IV", headerLen + 5}, {"ciphertext", len(b) - 20}, {"ICV", len(b) - 1}} {
				bad := bytes.Clone(b)
				bad[at.i] ^= 0x40
				if err := open(bad); err == nil {
					t.Fatalf("a flipped bit in the %s went unnoticed", at.name)
				}
			}
			other, _ := newSKCipher(s, k.er, k.ar)
			got, _ := parseMessage(b)
			if err := openSK(b, got, other); !errors.Is(err, errIntegrity) {
				t.Fatalf("opened with the other direction's keys: %v", err)
			}
		})
	}
}

func TestSKRefusesPayloadsOutsideIt(t *testing.T) {
	s := ikeSuite{encr: EncrAESGCM16, keyBits: 128}
	c, err := newSKCipher(s, make([]byte, 20), nil)
	if err != nil {
		t.Fatal(err)
	}
	m := &message{payloads: []payload{&noncePayload{data: make([]byte, 16)}}}
	if err := openSK(m.encode(), m, c); !errors.Is(err, errMalformed) {
		t.Fatalf("an unencrypted payload after IKE_SA_INIT: %v, want errMalformed", err)
	}
}
