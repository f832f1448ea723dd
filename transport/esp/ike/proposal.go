package ike

import (
	"encoding/binary"
	"fmt"
	"slices"
	"strings"
)

// Default proposals, strongest first, in strongSwan's notation.
var (
	DefaultIKEProposals = []string{
		"aes256gcm16-prfsha256-x25519-ecp256-modp2048",
		"aes128gcm16-prfsha256-x25519-ecp256-modp2048",
		"aes256-sha256-x25519-ecp256-modp2048",
		"aes128-sha256-x25519-ecp256-modp2048",
	}
	DefaultESPProposals = []string{"aes256gcm16", "aes128gcm16", "aes256-sha256", "aes128-sha256"}
)

// algorithm is one transform this package implements: a type, an
// identifier and, for encryption, a key length in bits.
type algorithm struct {
	typ  uint8
	id   uint16
	bits uint16
}

// algorithms maps strongSwan's keywords (swanctl.conf(5) "proposals") to
// transforms.
var algorithms = map[string]algorithm{
	"aes128gcm16": {transEncr, EncrAESGCM16, 128},
	"aes256gcm16": {transEncr, EncrAESGCM16, 256},
	"aes128":      {transEncr, EncrAESCBC, 128},
	"aes256":      {transEncr, EncrAESCBC, 256},
	"sha256":      {transInteg, IntegHMACSHA256_128, 0},
	"prfsha256":   {transPRF, prfHMACSHA256, 0},
	"x25519":      {transDH, dhX25519, 0},
	"curve25519":  {transDH, dhX25519, 0},
	"ecp256":      {transDH, dhECP256, 0},
	"modp2048":    {transDH, dhMODP2048, 0},
	"esn":         {transESN, esnYes, 0},
	"noesn":       {transESN, esnNo, 0},
}

// offer is one configured proposal: the algorithms of each transform type
// in order of preference.
type offer struct {
	name     string
	protocol uint8
	algs     map[uint8][]algorithm
}

// parseOffer reads a proposal in strongSwan's notation, such as
// "aes256gcm16-prfsha256-x25519" for IKE or "aes128-sha256" for ESP.
func parseOffer(s string, protocol uint8) (offer, error) {
	o := offer{name: s, protocol: protocol, algs: map[uint8][]algorithm{}}
	for _, kw := range strings.Split(strings.ToLower(s), "-") {
		a, ok := algorithms[kw]
		if !ok {
			return o, fmt.Errorf("unknown algorithm %q; use aes128gcm16, aes256gcm16, aes128, aes256, sha256, prfsha256, x25519, ecp256, modp2048, esn or noesn", kw)
		}
		if !slices.Contains(o.algs[a.typ], a) {
			o.algs[a.typ] = append(o.algs[a.typ], a)
		}
	}
	encr := o.algs[transEncr]
	if len(encr) == 0 {
		return o, fmt.Errorf("no encryption algorithm; add aes256gcm16 or aes256-sha256")
	}
	gcm := encr[0].id == EncrAESGCM16
	for _, a := range encr {
		if (a.id == EncrAESGCM16) != gcm {
			return o, fmt.Errorf("mixes AES-GCM with AES-CBC; put them in separate proposals")
		}
	}
	switch {
	case gcm && len(o.algs[transInteg]) > 0:
		return o, fmt.Errorf("AES-GCM authenticates by itself; remove sha256")
	case !gcm && len(o.algs[transInteg]) == 0:
		return o, fmt.Errorf("AES-CBC needs an integrity algorithm; add sha256")
	}
	if protocol == protoIKE {
		if len(o.algs[transESN]) > 0 {
			return o, fmt.Errorf("esn applies to ESP only; remove it")
		}
		if len(o.algs[transPRF]) == 0 {
			if gcm {
				return o, fmt.Errorf("AES-GCM needs a PRF; add prfsha256")
			}
			o.algs[transPRF] = []algorithm{algorithms["prfsha256"]}
		}
		if len(o.algs[transDH]) == 0 {
			return o, fmt.Errorf("no Diffie-Hellman group; add x25519, ecp256 or modp2048")
		}
		return o, nil
	}
	if len(o.algs[transPRF]) > 0 {
		return o, fmt.Errorf("a PRF applies to IKE only; remove prfsha256")
	}
	if len(o.algs[transDH]) > 0 {
		return o, fmt.Errorf("CHILD_SAs are keyed without PFS; remove the Diffie-Hellman group")
	}
	if len(o.algs[transESN]) == 0 {
		o.algs[transESN] = []algorithm{algorithms["noesn"]}
	}
	return o, nil
}

// transformTypes lists the transform types in the order they are sent.
var transformTypes = []uint8{transEncr, transPRF, transInteg, transDH, transESN}

// proposal is o as an SA payload proposal numbered num with spi.
func (o offer) proposal(num uint8, spi []byte) proposal {
	p := proposal{num: num, protocol: o.protocol, spi: spi}
	for _, typ := range transformTypes {
		for _, a := range o.algs[typ] {
			p.transforms = append(p.transforms, a.transform())
		}
	}
	return p
}

func (a algorithm) transform() transform {
	t := transform{typ: a.typ, id: a.id}
	if a.bits != 0 {
		t.attrs = []attribute{{typ: attrKeyLength, tv: true, value: binary.BigEndian.AppendUint16(nil, a.bits)}}
	}
	return t
}

// proposals numbers offers as the proposals of an SA payload.
func proposals(offers []offer, spi []byte) []proposal {
	ps := make([]proposal, len(offers))
	for i, o := range offers {
		ps[i] = o.proposal(uint8(i+1), spi)
	}
	return ps
}

// offered returns the algorithms of p: the transforms of each type that
// this package implements, in p's order. A transform with an attribute it
// does not know is left out (RFC 7296 §3.3.6).
func offered(p proposal) map[uint8][]algorithm {
	m := map[uint8][]algorithm{}
	for _, t := range p.transforms {
		bits, unknown := t.keyLength()
		if unknown {
			continue
		}
		m[t.typ] = append(m[t.typ], algorithm{typ: t.typ, id: t.id, bits: bits})
	}
	return m
}

// selection is one algorithm of each transform type that a proposal
// carries, agreed by both sides.
type selection struct {
	num      uint8
	protocol uint8
	spi      []byte // the peer's
	algs     map[uint8]algorithm
}

// choose picks the first of our offers that accepts one of theirs, and in
// it our most preferred algorithm of each type, as strongSwan does by
// default. dh, when not zero, is the only group acceptable.
func choose(theirs []proposal, ours []offer, dh uint16) (selection, bool) {
	for _, o := range ours {
		for _, p := range theirs {
			if s, ok := o.accept(p, dh); ok {
				return s, true
			}
		}
	}
	return selection{}, false
}

func (o offer) accept(p proposal, dh uint16) (selection, bool) {
	if p.protocol != o.protocol {
		return selection{}, false
	}
	s := selection{num: p.num, protocol: p.protocol, spi: p.spi, algs: map[uint8]algorithm{}}
	theirs := offered(p)
	for _, t := range p.transforms {
		if !slices.Contains(transformTypes, t.typ) {
			return selection{}, false // a type we would have to agree to blindly
		}
	}
	for _, typ := range transformTypes {
		mine, their := o.algs[typ], theirs[typ]
		if !slices.ContainsFunc(p.transforms, func(t transform) bool { return t.typ == typ }) {
			if len(mine) == 0 || typ == transESN && slices.Contains(mine, algorithms["noesn"]) {
				continue
			}
			return selection{}, false
		}
		if len(mine) == 0 {
			// A DH transform NONE may be listed beside real groups.
			if typ == transDH && slices.Contains(their, algorithm{typ: transDH}) {
				continue
			}
			return selection{}, false
		}
		i := slices.IndexFunc(mine, func(a algorithm) bool {
			return slices.Contains(their, a) && (typ != transDH || dh == 0 || a.id == dh)
		})
		if i < 0 {
			return selection{}, false
		}
		s.algs[typ] = mine[i]
	}
	return s, true
}

// proposal is s as the single proposal of an answer, carrying spi.
func (s selection) proposal(spi []byte) proposal {
	p := proposal{num: s.num, protocol: s.protocol, spi: spi}
	for _, typ := range transformTypes {
		if a, ok := s.algs[typ]; ok {
			p.transforms = append(p.transforms, a.transform())
		}
	}
	return p
}

// single reports whether p carries exactly one transform of each type, as
// an answer must (RFC 7296 §3.3).
func single(p proposal) bool {
	seen := map[uint8]bool{}
	for _, t := range p.transforms {
		if seen[t.typ] {
			return false
		}
		seen[t.typ] = true
	}
	return true
}

// ikeSuite is the algorithms of an IKE SA.
type ikeSuite struct {
	encr    uint16
	keyBits int
	integ   uint16 // 0 with AES-GCM
	dh      uint16
}

func (s selection) ikeSuite() ikeSuite {
	e := s.algs[transEncr]
	return ikeSuite{encr: e.id, keyBits: int(e.bits), integ: s.algs[transInteg].id, dh: s.algs[transDH].id}
}

// encrKeyLen is the length of SK_e: for AES-GCM the key and a 4-byte salt
// (RFC 5282 §7.1).
func (s ikeSuite) encrKeyLen() int {
	if s.encr == EncrAESGCM16 {
		return s.keyBits/8 + 4
	}
	return s.keyBits / 8
}

// integKeyLen is the length of SK_a: none for AES-GCM, 32 bytes for
// AUTH_HMAC_SHA2_256_128 (RFC 4868 §2.1.1).
func (s ikeSuite) integKeyLen() int {
	if s.integ == IntegHMACSHA256_128 {
		return 32
	}
	return 0
}

func (s ikeSuite) String() string {
	var b strings.Builder
	switch s.encr {
	case EncrAESGCM16:
		fmt.Fprintf(&b, "aes%dgcm16-prfsha256", s.keyBits)
	default:
		fmt.Fprintf(&b, "aes%d-sha256-prfsha256", s.keyBits)
	}
	fmt.Fprintf(&b, "-%s", dhName(s.dh))
	return b.String()
}

func dhName(g uint16) string {
	switch g {
	case dhX25519:
		return "x25519"
	case dhECP256:
		return "ecp256"
	case dhMODP2048:
		return "modp2048"
	}
	return fmt.Sprintf("group%d", g)
}

// childTransform is s as the Transform of a CHILD_SA.
func (s selection) childTransform() Transform {
	e := s.algs[transEncr]
	return Transform{
		Encr:    e.id,
		KeyBits: int(e.bits),
		Integ:   s.algs[transInteg].id,
		ESN:     s.algs[transESN].id == esnYes,
	}
}

// String names t in strongSwan's notation.
func (t Transform) String() string {
	s := fmt.Sprintf("aes%d", t.KeyBits)
	if t.Encr == EncrAESGCM16 {
		s += "gcm16"
	} else {
		s += "-sha256"
	}
	if t.ESN {
		s += "-esn"
	}
	return s
}
