package show

import (
	"io"

	"github.com/snorkel-net/snorkel/controller/internal/statusline"
)

// result is what one view found in one cluster: its status lines, and
// what it prints after them.
type result struct {
	statusline.Section
	// body is printed to Options.Out after the status lines: a table or
	// a block of details. Nil prints nothing.
	body func(io.Writer) error
	// shown: the view answered (a table, details, or a definite "none").
	shown bool
}

// none says, as a ✗ line, that the view found nothing to show; unlike
// Fail, the cluster itself was read.
func (r *result) none(format string, args ...any) {
	r.Add(statusline.Fail, format, args...)
}

// print writes the title with its mark and the notes to status, then the
// body to out.
func (r *result) print(title string, out, status io.Writer) error {
	r.Print(status, title)
	if r.body == nil {
		return nil
	}
	return r.body(out)
}

// bodyOf adapts a fixed text to result.body.
func bodyOf(text string) func(io.Writer) error {
	return func(w io.Writer) error {
		_, err := io.WriteString(w, text)
		return err
	}
}
