package dnsd

import (
	"bytes"
)

// maxLabels is the most labels a name under a zone can have and exist:
// _<port>._<proto>.<cluster>.<svc>.<ns>.svc.
const maxLabels = 6

// qname is a query name split for lookup: lower-cased into a buffer of
// the reply, relative to the zone it is in, with its labels' bounds. It
// refers to that buffer and allocates nothing.
type qname struct {
	zone int
	// rel is the name without the zone and without the dot before it; empty
	// at the apex.
	rel []byte
	n   int // labels in rel; maxLabels+1 means "more"
	// start and end of each label in rel, left to right.
	start, end [maxLabels]int
}

func (q *qname) label(i int) []byte { return q.rel[q.start[i]:q.end[i]] }

// parseName lower-cases name into buf and finds the zone it is in; false
// when it is in none of zones (lower-case FQDNs). Names with escapes
// (\. or \DDD) are in no zone this server has records in: they report
// the zone they would be in, with more labels than can exist.
func parseName(name string, zones []string, buf *[256]byte) (qname, bool) {
	var q qname
	if len(name) > len(buf) {
		return q, false
	}
	b := buf[:len(name)]
	escaped := false
	for i := 0; i < len(name); i++ {
		c := name[i]
		if c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c == '\\' {
			escaped = true
		}
		b[i] = c
	}
	q.zone = -1
	for i, z := range zones {
		switch {
		case len(b) == len(z) && string(b) == z:
			q.zone, q.rel = i, b[:0]
		case len(b) > len(z) && b[len(b)-len(z)-1] == '.' && string(b[len(b)-len(z):]) == z:
			q.zone, q.rel = i, b[:len(b)-len(z)-1]
		default:
			continue
		}
		break
	}
	if q.zone < 0 {
		return q, false
	}
	if escaped {
		// An escaped dot may sit where the zone seemed to begin; only a
		// name that really is in the zone is answered, and none of its
		// names has an escape.
		if !inZoneEscaped(name, zones[q.zone]) {
			return q, false
		}
		q.n = maxLabels + 1
		return q, true
	}
	if len(q.rel) == 0 {
		return q, true
	}
	end := len(q.rel)
	for end > 0 {
		i := bytes.LastIndexByte(q.rel[:end], '.')
		if q.n == maxLabels {
			q.n++
			return q, true
		}
		// Labels are filled right to left, then shifted.
		q.start[maxLabels-1-q.n], q.end[maxLabels-1-q.n] = i+1, end
		q.n++
		end = i
		if i < 0 {
			break
		}
	}
	off := maxLabels - q.n
	copy(q.start[:], q.start[off:])
	copy(q.end[:], q.end[off:])
	return q, true
}

// inZoneEscaped is the slow, exact check for names with escapes: whether
// name's labels end with zone's.
func inZoneEscaped(name, zone string) bool {
	nl := splitEscaped(name)
	zl := splitEscaped(zone)
	if len(nl) < len(zl) {
		return false
	}
	for i := range zl {
		if !bytes.EqualFold([]byte(nl[len(nl)-len(zl)+i]), []byte(zl[i])) {
			return false
		}
	}
	return true
}

// splitEscaped splits a presentation-format name into its labels,
// keeping escapes inside a label; \. does not split. \DDD escapes are
// compared as written, which can only miss a zone spelled with escapes.
func splitEscaped(name string) []string {
	var out []string
	start := 0
	for i := 0; i < len(name); i++ {
		switch name[i] {
		case '\\':
			i++
		case '.':
			out = append(out, name[start:i])
			start = i + 1
		}
	}
	if start < len(name) {
		out = append(out, name[start:])
	}
	return out
}
