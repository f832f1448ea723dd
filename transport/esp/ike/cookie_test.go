package ike

import (
	"bytes"
	"net/netip"
	"testing"
	"time"
)

func TestCookies(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	ni, from, spi := bytes.Repeat([]byte{7}, nonceLen), netip.MustParseAddrPort("192.0.2.1:4500"), uint64(0x1122334455667788)
	var j cookieJar
	c := j.make(now, ni, from, spi)
	if len(c) != 1+prfLen || len(c) > 64 {
		t.Fatalf("cookie of %d bytes, want a version byte and an HMAC, at most 64 (RFC 7296 §3.10.1)", len(c))
	}
	if !bytes.Equal(c, j.make(now, ni, from, spi)) {
		t.Fatal("the same request got two cookies: the jar must keep no state per request")
	}
	other := func(f func(ni []byte, from *netip.AddrPort, spi *uint64)) bool {
		n, a, s := bytes.Clone(ni), from, spi
		f(n, &a, &s)
		return j.valid(now, c, n, a, s)
	}
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{"the same request", other(func([]byte, *netip.AddrPort, *uint64) {})},
		{"another source port (only IPi is covered)", other(func(_ []byte, a *netip.AddrPort, _ *uint64) {
			*a = netip.AddrPortFrom(a.Addr(), 1024)
		})},
	} {
		if !tc.ok {
			t.Errorf("%s: refused", tc.name)
		}
	}
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{"another nonce", other(func(n []byte, _ *netip.AddrPort, _ *uint64) { n[0] ^= 1 })},
		{"another address", other(func(_ []byte, a *netip.AddrPort, _ *uint64) { *a = netip.MustParseAddrPort("192.0.2.9:4500") })},
		{"another SPI", other(func(_ []byte, _ *netip.AddrPort, s *uint64) { *s ^= 1 })},
		{"a flipped bit", func() bool { f := bytes.Clone(c); f[9] ^= 1; return j.valid(now, f, ni, from, spi) }()},
		{"another version", func() bool { f := bytes.Clone(c); f[0]++; return j.valid(now, f, ni, from, spi) }()},
		{"empty", j.valid(now, nil, ni, from, spi)},
	} {
		if tc.ok {
			t.Errorf("%s: accepted", tc.name)
		}
	}

	// A new secret each lifetime; a cookie of the one before is accepted
	// for one lifetime more, then no longer.
	later := now.Add(cookieLifetime)
	c2 := j.make(later, ni, from, spi)
	if c2[0] != c[0]+1 || bytes.Equal(c2[1:], c[1:]) {
		t.Fatal("the secret did not rotate after cookieLifetime")
	}
	if !j.valid(later, c, ni, from, spi) || !j.valid(later, c2, ni, from, spi) {
		t.Fatal("after one rotation, the old and the new cookie should both be accepted")
	}
	if j.valid(later.Add(cookieLifetime), c, ni, from, spi) {
		t.Fatal("a cookie two secrets old was accepted")
	}
	if !j.valid(later.Add(cookieLifetime), c2, ni, from, spi) {
		t.Fatal("a cookie of the previous secret was refused")
	}
	// An idle jar retires both secrets at once.
	c3 := j.make(later.Add(cookieLifetime), ni, from, spi)
	if j.valid(later.Add(4*cookieLifetime), c3, ni, from, spi) {
		t.Fatal("a cookie was accepted after two lifetimes without use")
	}
}
