package show

import (
	"fmt"
	"io"
	"strings"
	"unicode"
	"unicode/utf8"
)

// mark starts a status line, as subctl marks them.
type mark string

const (
	markOK   mark = "✓"
	markWarn mark = "⚠"
	markFail mark = "✗"
)

// note is a status line under a view's title.
type note struct {
	mark mark
	text string
}

// result is what one view found in one cluster.
type result struct {
	notes []note
	// body is printed to Options.Out after the status lines: a table or
	// a block of details. Nil prints nothing.
	body func(io.Writer) error
	// shown: the view answered (a table, details, or a definite "none").
	shown bool
	// failed: the cluster could not be read; Run's error says so.
	failed bool
}

func (r *result) warn(format string, args ...any) {
	r.notes = append(r.notes, note{markWarn, capitalize(fmt.Sprintf(format, args...))})
}

func (r *result) fail(format string, args ...any) {
	r.notes = append(r.notes, note{markFail, capitalize(fmt.Sprintf(format, args...))})
	r.failed = true
}

// none says, as a ✗ line, that the view found nothing to show; unlike
// fail, the cluster itself was read.
func (r *result) none(format string, args ...any) {
	r.notes = append(r.notes, note{markFail, capitalize(fmt.Sprintf(format, args...))})
}

func (r *result) success(format string, args ...any) {
	r.notes = append(r.notes, note{markOK, capitalize(fmt.Sprintf(format, args...))})
}

// titleMark is the worst mark among the notes: the title line's.
func (r *result) titleMark() mark {
	m := markOK
	for _, n := range r.notes {
		switch {
		case n.mark == markFail:
			return markFail
		case n.mark == markWarn:
			m = markWarn
		}
	}
	return m
}

// statusLine writes one " ✓ text" line.
func statusLine(w io.Writer, m mark, text string) {
	fmt.Fprintf(w, " %s %s\n", m, text)
}

// print writes the title with its mark and the notes to status, then the
// body to out.
func (r *result) print(title string, out, status io.Writer) error {
	statusLine(status, r.titleMark(), title)
	for _, n := range r.notes {
		statusLine(status, n.mark, strings.ReplaceAll(n.text, "\n", "\n   "))
	}
	if r.body == nil {
		return nil
	}
	return r.body(out)
}

func capitalize(s string) string {
	c, n := utf8.DecodeRuneInString(s)
	if n == 0 {
		return s
	}
	return string(unicode.ToUpper(c)) + s[n:]
}

// bodyOf adapts a fixed text to result.body.
func bodyOf(text string) func(io.Writer) error {
	return func(w io.Writer) error {
		_, err := io.WriteString(w, text)
		return err
	}
}
