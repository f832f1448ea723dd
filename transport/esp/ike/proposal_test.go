package ike

import (
	"strings"
	"testing"
)

func TestParseOffer(t *testing.T) {
	tests := []struct {
		name, s  string
		protocol uint8
		err      string // "" when accepted
		want     map[uint8][]uint16
	}{
		{"GCM IKE", "aes256gcm16-prfsha256-x25519-ecp256", protoIKE, "",
			map[uint8][]uint16{transEncr: {EncrAESGCM16}, transPRF: {prfHMACSHA256}, transDH: {dhX25519, dhECP256}}},
		{"CBC IKE takes its PRF from sha256", "aes128-sha256-modp2048", protoIKE, "",
			map[uint8][]uint16{transEncr: {EncrAESCBC}, transInteg: {IntegHMACSHA256_128}, transPRF: {prfHMACSHA256}, transDH: {dhMODP2048}}},
		{"ESP without ESN gets noesn", "aes128gcm16", protoESP, "", map[uint8][]uint16{transEncr: {EncrAESGCM16}, transESN: {esnNo}}},
		{"ESP with esn", "aes256-sha256-esn", protoESP, "",
			map[uint8][]uint16{transEncr: {EncrAESCBC}, transInteg: {IntegHMACSHA256_128}, transESN: {esnYes}}},
		{"unknown keyword", "aes128-sha1-modp2048", protoIKE, `unknown algorithm "sha1"`, nil},
		{"no encryption", "sha256-modp2048", protoIKE, "no encryption algorithm", nil},
		{"GCM with integrity", "aes128gcm16-sha256-x25519", protoIKE, "remove sha256", nil},
		{"CBC without integrity", "aes128-prfsha256-x25519", protoIKE, "add sha256", nil},
		{"GCM mixed with CBC", "aes128gcm16-aes128-sha256-x25519", protoIKE, "separate proposals", nil},
		{"IKE GCM without PRF", "aes128gcm16-x25519", protoIKE, "add prfsha256", nil},
		{"IKE without DH", "aes128gcm16-prfsha256", protoIKE, "add x25519", nil},
		{"IKE with esn", "aes128gcm16-prfsha256-x25519-esn", protoIKE, "ESP only", nil},
		{"ESP with a DH group", "aes128gcm16-x25519", protoESP, "without PFS", nil},
		{"ESP with a PRF", "aes128gcm16-prfsha256", protoESP, "IKE only", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, err := parseOffer(tt.s, tt.protocol)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err %v, want one containing %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for typ, ids := range tt.want {
				var got []uint16
				for _, a := range o.algs[typ] {
					got = append(got, a.id)
				}
				if len(got) != len(ids) {
					t.Fatalf("type %d: %v, want %v", typ, got, ids)
				}
				for i := range ids {
					if got[i] != ids[i] {
						t.Fatalf("type %d: %v, want %v", typ, got, ids)
					}
				}
			}
			if len(o.algs) != len(tt.want) {
				t.Fatalf("%d transform types, want %d", len(o.algs), len(tt.want))
			}
		})
	}
}

func mustOffers(t *testing.T, protocol uint8, names ...string) []offer {
	t.Helper()
	var out []offer
	for _, n := range names {
		o, err := parseOffer(n, protocol)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, o)
	}
	return out
}

func TestChoose(t *testing.T) {
	// strongSwan's own default IKE proposal lists many algorithms of each
	// type in one proposal.
	theirs := mustOffers(t, protoIKE, "aes128gcm16-aes256gcm16-prfsha256-ecp256-x25519-modp2048")
	ours := mustOffers(t, protoIKE, "aes256-sha256-x25519", "aes256gcm16-prfsha256-x25519-ecp256")
	sel, ok := choose(proposals(theirs, nil), ours, 0)
	if !ok {
		t.Fatal("no proposal chosen")
	}
	if s := sel.ikeSuite(); s.encr != EncrAESGCM16 || s.keyBits != 256 || s.dh != dhX25519 {
		t.Fatalf("chose %v; want our preference among what they offer: aes256gcm16 with x25519", s)
	}
	if sel, ok := choose(proposals(theirs, nil), ours, dhECP256); !ok || sel.ikeSuite().dh != dhECP256 {
		t.Fatal("the KE payload's group is not taken when acceptable")
	}
	if _, ok := choose(proposals(theirs, nil), ours, dhMODP2048); ok {
		t.Fatal("a group we do not offer was accepted")
	}
	if !single(sel.proposal(nil)) {
		t.Fatal("an answer with more than one transform of a type")
	}

	t.Run("a transform with an unknown attribute is not agreed to", func(t *testing.T) {
		p := mustOffers(t, protoESP, "aes128gcm16")[0].proposal(1, []byte{1, 2, 3, 4})
		p.transforms[0].attrs = append(p.transforms[0].attrs, attribute{typ: 99, tv: true, value: []byte{0, 1}})
		if _, ok := choose([]proposal{p}, mustOffers(t, protoESP, "aes128gcm16"), 0); ok {
			t.Fatal("accepted")
		}
	})
	t.Run("an ESP proposal without ESN means no ESN", func(t *testing.T) {
		p := proposal{num: 1, protocol: protoESP, spi: []byte{1, 2, 3, 4}, transforms: []transform{algorithms["aes128gcm16"].transform()}}
		sel, ok := choose([]proposal{p}, mustOffers(t, protoESP, "aes128gcm16"), 0)
		if !ok || sel.childTransform().ESN {
			t.Fatalf("ok %v, transform %+v", ok, sel.childTransform())
		}
		if _, ok := choose([]proposal{p}, mustOffers(t, protoESP, "aes128gcm16-esn"), 0); ok {
			t.Fatal("ESN required by us but taken from a proposal without it")
		}
	})
	t.Run("an ESP proposal with PFS is refused", func(t *testing.T) {
		p := mustOffers(t, protoESP, "aes128gcm16")[0].proposal(1, []byte{1, 2, 3, 4})
		p.transforms = append(p.transforms, transform{typ: transDH, id: dhX25519})
		if _, ok := choose([]proposal{p}, mustOffers(t, protoESP, "aes128gcm16"), 0); ok {
			t.Fatal("accepted")
		}
		p.transforms = append(p.transforms, transform{typ: transDH, id: 0})
		if _, ok := choose([]proposal{p}, mustOffers(t, protoESP, "aes128gcm16"), 0); !ok {
			t.Fatal("a DH transform NONE beside a group should be acceptable")
		}
	})
	t.Run("the protocol must match", func(t *testing.T) {
		if _, ok := choose(proposals(mustOffers(t, protoESP, "aes128gcm16"), nil), mustOffers(t, protoIKE, "aes128gcm16-prfsha256-x25519"), 0); ok {
			t.Fatal("an ESP proposal accepted for IKE")
		}
	})
}
