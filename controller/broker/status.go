package broker

import (
	"fmt"
	"io"
)

// status prints a command's progress in subctl's lines, as subctl prints
// them when its output is not a terminal: a step starts with
// " • step  ..." and ends with " ✓ step" (⚠ if it warned, ✗ if it
// failed), followed by what it found, each line with its own mark. A
// user who reads subctl's output, or a script that greps it, reads
// Snorkel's the same way.
type status struct {
	out    io.Writer
	step   string
	failed bool
	notes  []statusNote
}

type statusNote struct{ mark, text string }

// The marks of subctl's status lines.
const (
	markSuccess = "✓"
	markWarning = "⚠"
	markFailure = "✗"
)

func newStatus(out io.Writer) *status { return &status{out: out} }

// start ends the current step and begins the next.
func (s *status) start(format string, a ...any) {
	s.end()
	s.step = fmt.Sprintf(format, a...)
	fmt.Fprintf(s.out, " • %s  ...\n", s.step)
}

// success and warning note what the step found; outside a step they
// print at once.
func (s *status) success(format string, a ...any) { s.note(markSuccess, format, a...) }
func (s *status) warning(format string, a ...any) { s.note(markWarning, format, a...) }

func (s *status) note(mark, format string, a ...any) {
	text := fmt.Sprintf(format, a...)
	if s.step == "" {
		fmt.Fprintf(s.out, " %s %s\n", mark, text)
		return
	}
	s.notes = append(s.notes, statusNote{mark, text})
}

// failure marks the step failed if err is not nil, and returns err: the
// command prints it once, after the step's line.
func (s *status) failure(err error) error {
	if err != nil {
		s.failed = true
	}
	return err
}

// end prints the current step's result and its notes.
func (s *status) end() {
	if s.step == "" {
		return
	}
	mark := markSuccess
	for _, n := range s.notes {
		if n.mark == markWarning {
			mark = markWarning
		}
	}
	if s.failed {
		mark = markFailure
	}
	fmt.Fprintf(s.out, " %s %s\n", mark, s.step)
	for _, n := range s.notes {
		fmt.Fprintf(s.out, " %s %s\n", n.mark, n.text)
	}
	s.step, s.failed, s.notes = "", false, nil
}
