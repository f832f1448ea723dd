package ike

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// identity is an IKE identification: an ID type and its data (RFC 7296
// §3.5).
type identity struct {
	typ  uint8
	data []byte
}

// parseIdentity reads an identity written as strongSwan writes them
// (swanctl.conf(5) "id"): an IP address is ID_IPV4_ADDR or ID_IPV6_ADDR,
// "keyid:" followed by text or by "#" and hex digits is ID_KEY_ID,
// "user@host" is ID_RFC822_ADDR, anything else ("gw.example.org",
// optionally with a leading "@") is ID_FQDN.
func parseIdentity(s string) (identity, error) {
	switch {
	case s == "":
		return identity{}, fmt.Errorf("empty identity")
	case strings.HasPrefix(s, "keyid:"):
		v := strings.TrimPrefix(s, "keyid:")
		if h, ok := strings.CutPrefix(v, "#"); ok {
			b, err := hex.DecodeString(h)
			if err != nil || len(b) == 0 {
				return identity{}, fmt.Errorf("identity %q: the key ID after \"keyid:#\" must be hex digits", s)
			}
			return identity{typ: idKeyID, data: b}, nil
		}
		if v == "" {
			return identity{}, fmt.Errorf("identity %q: empty key ID", s)
		}
		return identity{typ: idKeyID, data: []byte(v)}, nil
	case strings.ContainsAny(s, "=,"):
		return identity{}, fmt.Errorf("identity %q: distinguished names are not supported; use an FQDN, an address or a key ID", s)
	}
	if a, err := netip.ParseAddr(s); err == nil {
		if a.Is4() || a.Is4In6() {
			return identity{typ: idIPv4Addr, data: a.Unmap().AsSlice()}, nil
		}
		return identity{typ: idIPv6Addr, data: a.AsSlice()}, nil
	}
	if strings.Contains(s, "@") && !strings.HasPrefix(s, "@") {
		return identity{typ: idRFC822, data: []byte(s)}, nil
	}
	return identity{typ: idFQDN, data: []byte(strings.TrimPrefix(s, "@"))}, nil
}

func (id identity) equal(o identity) bool {
	return id.typ == o.typ && bytes.Equal(id.data, o.data)
}

// String writes id back in the notation parseIdentity reads; the data of
// an identity is public, so it may be logged.
func (id identity) String() string {
	switch id.typ {
	case idIPv4Addr, idIPv6Addr:
		if a, ok := netip.AddrFromSlice(id.data); ok {
			return a.String()
		}
	case idFQDN, idRFC822:
		if q := strconv.Quote(string(id.data)); q[1:len(q)-1] == string(id.data) {
			return string(id.data)
		} else {
			return q
		}
	case idKeyID:
		return "keyid:#" + hex.EncodeToString(id.data)
	}
	return fmt.Sprintf("ID type %d #%s", id.typ, hex.EncodeToString(id.data))
}
