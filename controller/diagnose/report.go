package diagnose

import (
	"fmt"
	"io"
	"strings"
)

// mark starts a status line, as subctl marks them.
type mark string

const (
	markOK   mark = "✓"
	markWarn mark = "⚠"
	markFail mark = "✗"
)

type line struct {
	mark mark
	text string
}

// result is what one check found in one cluster.
type result struct {
	lines []line
	// verbose keeps the ✓ line of every object checked, not only the
	// summary.
	verbose bool
}

func (r *result) add(m mark, format string, args ...any) {
	r.lines = append(r.lines, line{m, fmt.Sprintf(format, args...)})
}

func (r *result) ok(format string, args ...any)   { r.add(markOK, format, args...) }
func (r *result) warn(format string, args ...any) { r.add(markWarn, format, args...) }
func (r *result) fail(format string, args ...any) { r.add(markFail, format, args...) }

// detail is a ✓ line about one object, kept with --verbose only.
func (r *result) detail(format string, args ...any) {
	if r.verbose {
		r.ok(format, args...)
	}
}

// failed reports whether any line is a ✗.
func (r *result) failed() bool {
	for _, l := range r.lines {
		if l.mark == markFail {
			return true
		}
	}
	return false
}

// titleMark is the worst mark among the lines.
func (r *result) titleMark() mark {
	m := markOK
	for _, l := range r.lines {
		switch l.mark {
		case markFail:
			return markFail
		case markWarn:
			m = markWarn
		}
	}
	return m
}

// print writes the title with the worst mark, then the lines, as subctl's
// reporter ends a check.
func (r *result) print(w io.Writer, title string) {
	fmt.Fprintf(w, " %s %s\n", r.titleMark(), title)
	for _, l := range r.lines {
		fmt.Fprintf(w, " %s %s\n", l.mark, strings.ReplaceAll(l.text, "\n", "\n   "))
	}
}
