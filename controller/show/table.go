package show

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"unicode/utf8"
)

// column is a table column: its heading and, when not zero, the length its
// cells are cut to, as subctl cuts long gateway names and subnet lists.
type column struct {
	name   string
	maxLen int
}

// table is a list of rows under columns, printed aligned.
type table struct {
	columns []column
	rows    [][]string
}

// add appends a row: booleans print as yes/no, string lists joined by
// ", ", anything else with %v.
func (t *table) add(values ...any) {
	row := make([]string, len(t.columns))
	for i, v := range values {
		var s string
		switch v := v.(type) {
		case bool:
			s = "no"
			if v {
				s = "yes"
			}
		case []string:
			s = strings.Join(v, ", ")
		case string:
			s = v
		default:
			s = fmt.Sprint(v)
		}
		// A cell is one line: a multi-line message becomes "; "-separated.
		s = strings.ReplaceAll(strings.TrimSpace(s), "\n", "; ")
		row[i] = cut(strings.ReplaceAll(s, "\t", " "), t.columns[i].maxLen)
	}
	t.rows = append(t.rows, row)
}

func (t *table) empty() bool { return len(t.rows) == 0 }

// cut shortens s to n characters; n == 0 keeps it whole.
func cut(s string, n int) string {
	if n == 0 || utf8.RuneCountInString(s) <= n {
		return s
	}
	return string([]rune(s)[:n])
}

// write prints the heading and the rows, columns three spaces apart and
// without trailing blanks; an empty table prints nothing.
func (t *table) write(w io.Writer) error {
	if t.empty() {
		return nil
	}
	var b bytes.Buffer
	tw := tabwriter.NewWriter(&b, 0, 0, 3, ' ', 0)
	heads := make([]string, len(t.columns))
	for i, c := range t.columns {
		heads[i] = c.name
	}
	fmt.Fprintln(tw, strings.Join(heads, "\t"))
	for _, r := range t.rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	var out strings.Builder
	for line := range strings.Lines(b.String()) {
		out.WriteString(strings.TrimRight(line, " \n"))
		out.WriteByte('\n')
	}
	_, err := io.WriteString(w, out.String())
	return err
}
