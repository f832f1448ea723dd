package verify

import (
	"encoding/xml"
	"fmt"
	"io"
	"os"
)

// The JUnit XML elements the report uses, as CI systems read them (the
// Ant/Surefire schema that Ginkgo, behind subctl verify, writes).
type (
	junitSuites struct {
		XMLName  xml.Name     `xml:"testsuites"`
		Tests    int          `xml:"tests,attr"`
		Failures int          `xml:"failures,attr"`
		Skipped  int          `xml:"skipped,attr"`
		Suites   []junitSuite `xml:"testsuite"`
	}
	junitSuite struct {
		Name     string      `xml:"name,attr"`
		Tests    int         `xml:"tests,attr"`
		Failures int         `xml:"failures,attr"`
		Skipped  int         `xml:"skipped,attr"`
		Cases    []junitCase `xml:"testcase"`
	}
	junitCase struct {
		Name      string        `xml:"name,attr"`
		Classname string        `xml:"classname,attr"`
		Failure   *junitMessage `xml:"failure,omitempty"`
		Skipped   *junitMessage `xml:"skipped,omitempty"`
		SystemOut string        `xml:"system-out,omitempty"`
	}
	junitMessage struct {
		Message string `xml:"message,attr"`
	}
)

// WriteJUnit writes the results as a JUnit XML report: one suite for the
// pair of clusters, one test case per row of the table, named like its
// CHECK, FROM and TO; a failed check carries the table's reason and its
// pod's log.
func WriteJUnit(w io.Writer, from, to string, results []Result) error {
	c := Count(results)
	suite := junitSuite{Name: fmt.Sprintf("snorkel verify %s → %s", from, to), Tests: len(results), Failures: c.Failed, Skipped: c.Skipped}
	for _, r := range results {
		tc := junitCase{Name: fmt.Sprintf("%s: %s, from %s to %s", r.Kind, r.Name, r.From, r.To), Classname: string(r.Kind), SystemOut: r.Log}
		switch {
		case r.Skipped():
			tc.Skipped = &junitMessage{Message: r.Skip}
		case !r.Passed:
			tc.Failure = &junitMessage{Message: r.Detail}
		}
		suite.Cases = append(suite.Cases, tc)
	}
	report := junitSuites{Tests: suite.Tests, Failures: suite.Failures, Skipped: suite.Skipped, Suites: []junitSuite{suite}}
	if _, err := io.WriteString(w, xml.Header); err != nil {
		return err
	}
	enc := xml.NewEncoder(w)
	enc.Indent("", "  ")
	if err := enc.Encode(report); err != nil {
		return err
	}
	_, err := io.WriteString(w, "\n")
	return err
}

// writeJUnitFile writes the report to path.
func writeJUnitFile(path, from, to string, results []Result) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("--junit-report: %w", err)
	}
	if err := WriteJUnit(f, from, to, results); err != nil {
		f.Close()
		return fmt.Errorf("--junit-report %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("--junit-report %s: %w", path, err)
	}
	return nil
}
