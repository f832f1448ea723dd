package gather

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

type note struct {
	mark mark
	text string
}

// section collects the notes of one "Gathering MODULE TYPE" step, so that
// its title can carry the worst of their marks.
type section struct {
	notes []note
}

func (s *section) add(m mark, format string, args ...any) {
	s.notes = append(s.notes, note{m, capitalize(fmt.Sprintf(format, args...))})
}

func (s *section) success(format string, args ...any) { s.add(markOK, format, args...) }
func (s *section) warn(format string, args ...any)    { s.add(markWarn, format, args...) }
func (s *section) fail(format string, args ...any)    { s.add(markFail, format, args...) }

// worst is the title's mark.
func (s *section) worst() mark {
	m := markOK
	for _, n := range s.notes {
		switch n.mark {
		case markFail:
			return markFail
		case markWarn:
			m = markWarn
		}
	}
	return m
}

// print writes the title with the worst mark, then the notes.
func (s *section) print(w io.Writer, title string) {
	statusLine(w, s.worst(), title)
	for _, n := range s.notes {
		statusLine(w, n.mark, n.text)
	}
}

func statusLine(w io.Writer, m mark, text string) {
	fmt.Fprintf(w, " %s %s\n", m, strings.ReplaceAll(text, "\n", "\n   "))
}

func capitalize(s string) string {
	c, n := utf8.DecodeRuneInString(s)
	if n == 0 {
		return s
	}
	return string(unicode.ToUpper(c)) + s[n:]
}
