package verify

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// Result is a check's outcome.
type Result struct {
	Check
	// Pod ran the check; Passed is its exit status 0; Detail its last
	// log line, or why it did not finish; Log all its log.
	Pod    string
	Passed bool
	Detail string
	Log    string
}

// Skipped reports whether the check did not run.
func (r Result) Skipped() bool { return r.Skip != "" }

// Counts are the results' totals.
type Counts struct{ Passed, Failed, Skipped int }

// Count totals results.
func Count(results []Result) Counts {
	var c Counts
	for _, r := range results {
		switch {
		case r.Skipped():
			c.Skipped++
		case r.Passed:
			c.Passed++
		default:
			c.Failed++
		}
	}
	return c
}

// WriteTable prints the results as CHECK | FROM | TO | RESULT, then the
// summary line.
func WriteTable(w io.Writer, from, to string, results []Result) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "CHECK\tFROM\tTO\tRESULT")
	for _, r := range results {
		fmt.Fprintf(tw, "%s: %s\t%s\t%s\t%s\n", r.Kind, r.Name, r.From, r.To, r.outcome())
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	c := Count(results)
	mark := "✓"
	if c.Failed > 0 {
		mark = "✗"
	}
	_, err := fmt.Fprintf(w, "%s %s → %s: %d passed, %d failed, %d skipped\n", mark, from, to, c.Passed, c.Failed, c.Skipped)
	return err
}

func (r Result) outcome() string {
	switch {
	case r.Skipped():
		return "skipped: " + r.Skip
	case r.Passed:
		return "✓"
	}
	return "✗ " + r.Detail
}

// WriteLogs prints each check pod's log under a heading naming the check.
func WriteLogs(w io.Writer, results []Result) error {
	for _, r := range results {
		if r.Skipped() {
			continue
		}
		fmt.Fprintf(w, "--- %s (%s: %s, from %s to %s)\n", r.Pod, r.Kind, r.Name, r.From, r.To)
		if _, err := fmt.Fprintln(w, strings.TrimRight(r.Log, "\n")); err != nil {
			return err
		}
	}
	return nil
}
