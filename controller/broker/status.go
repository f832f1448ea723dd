package broker

import (
	"fmt"
	"io"

	"github.com/snorkel-net/snorkel/controller/internal/statusline"
)

// status prints a command's progress in subctl's lines, as subctl prints
// them when its output is not a terminal: a step starts with
// " • step  ..." and ends with " ✓ step" (⚠ if it warned, ✗ if it
// failed), followed by what it found, each line with its own mark. A
// user who reads subctl's output, or a script that greps it, reads
// Snorkel's the same way.
type status struct {
	out  io.Writer
	step string
	sec  statusline.Section
}

func newStatus(out io.Writer) *status { return &status{out: out} }

// start ends the current step and begins the next.
func (s *status) start(format string, a ...any) {
	s.end()
	s.step = fmt.Sprintf(format, a...)
	fmt.Fprintf(s.out, " • %s  ...\n", s.step)
}

// success and warning note what the step found; outside a step they
// print at once.
func (s *status) success(format string, a ...any) { s.note(statusline.OK, format, a...) }
func (s *status) warning(format string, a ...any) { s.note(statusline.Warn, format, a...) }

func (s *status) note(m statusline.Mark, format string, a ...any) {
	if s.step == "" {
		statusline.Write(s.out, m, fmt.Sprintf(format, a...))
		return
	}
	s.sec.Add(m, format, a...)
}

// failure marks the step failed if err is not nil, and returns err: the
// command prints it once, after the step's line.
func (s *status) failure(err error) error {
	if err != nil {
		s.sec.SetFailed()
	}
	return err
}

// end prints the current step's result and its notes.
func (s *status) end() {
	if s.step == "" {
		return
	}
	s.sec.Print(s.out, s.step)
	s.step, s.sec = "", statusline.Section{}
}
