package natdiscovery

import (
	"bytes"
	"net/netip"
	"testing"
)

var testKey = NewKey([]byte("a clusterset pre-shared key"))

func TestMessageRoundTrip(t *testing.T) {
	for _, m := range []Message{
		{Type: Request, Nonce: [NonceLen]byte{1, 2, 3}, From: "c1", To: "c2"},
		{Type: Response, Nonce: [NonceLen]byte{9}, From: "c2", To: "c1", Seen: netip.MustParseAddrPort("198.51.100.7:61000")},
		{Type: Response, From: "c2", To: "c1", Seen: netip.MustParseAddrPort("[2001:db8::7]:4490")},
	} {
		b := m.Append(nil, &testKey)
		if len(b) > MaxSize {
			t.Errorf("%+v: %d bytes, more than MaxSize %d", m, len(b), MaxSize)
		}
		got, drop := Parse(b, &testKey)
		if drop != NotDropped || got != m {
			t.Errorf("Parse(Append(%+v)) = %+v, %v", m, got, drop)
		}
	}
}

func TestRequestIsAsLargeAsItsResponse(t *testing.T) {
	req := Message{Type: Request, From: "c1", To: "c2"}
	resp := Message{Type: Response, From: "c2", To: "c1", Seen: netip.MustParseAddrPort("[2001:db8::7]:4490")}
	if q, r := len(req.Append(nil, &testKey)), len(resp.Append(nil, &testKey)); q < r {
		t.Errorf("request %d bytes, response %d: a spoofed request would be amplified", q, r)
	}
}

func TestParseDrops(t *testing.T) {
	good := Message{Type: Request, From: "c1", To: "c2"}
	b := good.Append(nil, &testKey)
	other := NewKey([]byte("another clusterset's key"))
	flip := func(i int) []byte {
		c := bytes.Clone(b)
		c[i] ^= 1
		return c
	}
	// A request whose seen slot is set, correctly authenticated.
	withSeen := (&Message{Type: Response, From: "c1", To: "c2", Seen: netip.MustParseAddrPort("192.0.2.1:1")}).Append(nil, &testKey)
	withSeen[len(magic)+1] = byte(Request)
	reseal := func(c []byte) []byte {
		body := c[:len(c)-macLen]
		return append(bytes.Clone(body), mac(&testKey, body)...)
	}
	badType := bytes.Clone(b)
	badType[len(magic)+1] = 7
	for _, tc := range []struct {
		name string
		b    []byte
		want Drop
	}{
		{"empty datagram is malformed", nil, DropMalformed},
		{"a message too short for its fields is malformed", b[:headerLen+2], DropMalformed},
		{"a truncated message fails the MAC", b[:len(b)-1], DropMAC},
		{"another magic is malformed", flip(0), DropMalformed},
		{"another version is refused", flip(len(magic)), DropVersion},
		{"another key's message fails the MAC", good.Append(nil, &other), DropMAC},
		{"a changed nonce fails the MAC", flip(len(magic) + 3), DropMAC},
		{"a changed MAC fails", flip(len(b) - 1), DropMAC},
		{"a request with a seen address is malformed", reseal(withSeen), DropMalformed},
		{"an unknown type is malformed", reseal(badType), DropMalformed},
		{"an oversized datagram is malformed", make([]byte, MaxSize+1), DropMalformed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, got := Parse(tc.b, &testKey); got != tc.want {
				t.Errorf("Parse = %v, want %v", got, tc.want)
			}
		})
	}
}

func FuzzParse(f *testing.F) {
	f.Add((&Message{Type: Request, From: "c1", To: "c2"}).Append(nil, &testKey))
	f.Add((&Message{Type: Response, From: "c2", To: "c1", Seen: netip.MustParseAddrPort("192.0.2.1:4490")}).Append(nil, &testKey))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, drop := Parse(b, &testKey)
		if drop != NotDropped {
			return
		}
		// What parses re-encodes to the same bytes.
		if again := m.Append(nil, &testKey); !bytes.Equal(again, b) {
			t.Fatalf("Parse then Append changed %x to %x", b, again)
		}
	})
}
