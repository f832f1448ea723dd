package statusline

import (
	"fmt"
	"io"
)

// Section collects the notes of one step (a view, a check, a gathered
// module), so that its title, printed first, can carry the worst of their
// marks. The zero Section is empty and ready to use.
type Section struct {
	// KeepCase prints each note as formatted. Otherwise its first letter
	// is capitalized, which suits notes ending in an error but not a note
	// that starts with a lower-case name (dnsd).
	KeepCase bool

	notes  []Note
	failed bool
}

// Note is one line under a section's title.
type Note struct {
	Mark Mark
	Text string
}

// Success notes a ✓ line.
func (s *Section) Success(format string, args ...any) { s.Add(OK, format, args...) }

// Warn notes a ⚠ line.
func (s *Section) Warn(format string, args ...any) { s.Add(Warn, format, args...) }

// Fail notes a ✗ line and fails the section.
func (s *Section) Fail(format string, args ...any) {
	s.Add(Fail, format, args...)
	s.failed = true
}

// Add notes a line with mark m. A ✗ added here marks the title but does
// not fail the section: it says, for one, that there was nothing to find.
func (s *Section) Add(m Mark, format string, args ...any) {
	text := fmt.Sprintf(format, args...)
	if !s.KeepCase {
		text = Capitalize(text)
	}
	s.notes = append(s.notes, Note{m, text})
}

// Notes are the lines noted so far, in order.
func (s *Section) Notes() []Note { return s.notes }

// SetFailed fails the section without a note, for a caller that prints
// the error itself after the section.
func (s *Section) SetFailed() { s.failed = true }

// Failed reports whether Fail or SetFailed was called.
func (s *Section) Failed() bool { return s.failed }

// Worst is the title's mark: ✗ if the section failed or any note is a ✗,
// else ⚠ if any note is a ⚠, else ✓.
func (s *Section) Worst() Mark {
	if s.failed {
		return Fail
	}
	m := OK
	for _, n := range s.notes {
		switch n.Mark {
		case Fail:
			return Fail
		case Warn:
			m = Warn
		}
	}
	return m
}

// Print writes the title with the worst mark, then the notes.
func (s *Section) Print(w io.Writer, title string) {
	Write(w, s.Worst(), title)
	for _, n := range s.notes {
		Write(w, n.Mark, n.Text)
	}
}
