package ike

import (
	"net/netip"
	"slices"
)

// Traffic selectors here are address ranges for any protocol and port
// (RFC 7296 §3.13.1); the data plane matches on prefixes, so ranges are
// turned into the prefixes that cover them exactly.

// selectors returns one any-protocol, any-port selector per prefix.
func selectors(prefixes []netip.Prefix) []selector {
	s := make([]selector, len(prefixes))
	for i, p := range prefixes {
		first, last := prefixRange(p)
		s[i] = selector{endPort: 65535, start: first, end: last}
	}
	return s
}

// prefixRange returns the first and last address of p.
func prefixRange(p netip.Prefix) (first, last netip.Addr) {
	p = p.Masked()
	b := p.Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	last, _ = netip.AddrFromSlice(b)
	return p.Addr(), last
}

// rangePrefixes returns the fewest prefixes that cover first..last
// exactly, in address order; none if last precedes first or the family
// differs.
func rangePrefixes(first, last netip.Addr) []netip.Prefix {
	var out []netip.Prefix
	if first.Is4() != last.Is4() {
		return nil
	}
	for first.Compare(last) <= 0 {
		for bits := 0; bits <= first.BitLen(); bits++ {
			p := netip.PrefixFrom(first, bits).Masked()
			if _, end := prefixRange(p); p.Addr() == first && end.Compare(last) <= 0 {
				out = append(out, p)
				first = end.Next()
				break
			}
		}
		if !first.IsValid() {
			break // the range ended at the family's last address
		}
	}
	return out
}

// wholeSelector reports whether s covers every protocol and port, the
// only kind of selector a Snorkel CHILD_SA carries.
func wholeSelector(s selector) bool {
	return s.proto == 0 && s.startPort == 0 && s.endPort == 65535
}

// narrow returns the addresses of the peer's whole selectors that lie in
// ours, as canonical prefixes (RFC 7296 §2.9).
func narrow(theirs []selector, ours []netip.Prefix) []netip.Prefix {
	var out []netip.Prefix
	for _, s := range theirs {
		if !wholeSelector(s) {
			continue
		}
		for _, p := range ours {
			first, last := prefixRange(p)
			if first.Is4() != s.start.Is4() {
				continue
			}
			lo, hi := maxAddr(first, s.start), minAddr(last, s.end)
			out = append(out, rangePrefixes(lo, hi)...)
		}
	}
	return canonical(out)
}

// within returns the prefixes of the peer's selectors if each is whole and
// lies in ours, for checking a responder's narrowing.
func within(theirs []selector, ours []netip.Prefix) ([]netip.Prefix, bool) {
	var out []netip.Prefix
	for _, s := range theirs {
		exact := rangePrefixes(s.start, s.end)
		if !wholeSelector(s) || len(exact) == 0 || !slices.Equal(narrow([]selector{s}, ours), exact) {
			return nil, false
		}
		out = append(out, exact...)
	}
	return canonical(out), len(out) > 0
}

// canonical sorts prefixes, merges overlapping and adjacent ones and
// returns the fewest prefixes covering the same addresses.
func canonical(ps []netip.Prefix) []netip.Prefix {
	type span struct{ first, last netip.Addr }
	spans := make([]span, 0, len(ps))
	for _, p := range ps {
		f, l := prefixRange(p)
		spans = append(spans, span{f, l})
	}
	slices.SortFunc(spans, func(a, b span) int { return a.first.Compare(b.first) })
	var out []netip.Prefix
	for i := 0; i < len(spans); {
		cur := spans[i]
		j := i + 1
		for ; j < len(spans) && spans[j].first.Is4() == cur.first.Is4(); j++ {
			next := cur.last.Next()
			if next.IsValid() && spans[j].first.Compare(next) > 0 {
				break
			}
			cur.last = maxAddr(cur.last, spans[j].last)
		}
		out = append(out, rangePrefixes(cur.first, cur.last)...)
		i = j
	}
	return out
}

func maxAddr(a, b netip.Addr) netip.Addr {
	if a.Compare(b) >= 0 {
		return a
	}
	return b
}

func minAddr(a, b netip.Addr) netip.Addr {
	if a.Compare(b) <= 0 {
		return a
	}
	return b
}
