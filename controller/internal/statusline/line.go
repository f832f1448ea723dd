package statusline

import (
	"fmt"
	"io"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Mark starts a status line.
type Mark string

// The marks of subctl's status lines, from best to worst.
const (
	OK   Mark = "✓"
	Warn Mark = "⚠"
	Fail Mark = "✗"
)

// Write writes the line " m text". The lines after the first of a
// multi-line text are indented under the text, so that only a mark starts
// a line.
func Write(w io.Writer, m Mark, text string) {
	fmt.Fprintf(w, " %s %s\n", m, strings.ReplaceAll(text, "\n", "\n   "))
}

// Capitalize upper-cases the first letter of s: a status line reads as a
// sentence, and a Go error, which often ends one, starts in lower case.
func Capitalize(s string) string {
	c, n := utf8.DecodeRuneInString(s)
	if n == 0 {
		return s
	}
	return string(unicode.ToUpper(c)) + s[n:]
}
