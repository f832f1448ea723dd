package packet

import (
	"regexp"
	"testing"
)

func TestDropReasonNamesAreDistinctMetricLabels(t *testing.T) {
	label := regexp.MustCompile(`^[a-z][a-z0-9_]*$`)
	seen := map[string]DropReason{}
	for r := DropReason(0); int(r) < NumDropReasons; r++ {
		s := r.String()
		if !label.MatchString(s) || s == "unknown" {
			t.Errorf("DropReason(%d).String() = %q, want a snake_case name", r, s)
		}
		if prev, ok := seen[s]; ok {
			t.Errorf("DropReason %d and %d share the name %q", prev, r, s)
		}
		seen[s] = r
	}
}

func TestDropReasonNames(t *testing.T) {
	tests := []struct {
		r    DropReason
		want string
	}{
		{DropNone, "none"},
		{DropTruncated, "truncated"},
		{DropBadVersion, "bad_version"},
		{DropBadHeaderLength, "bad_header_length"},
		{DropBadTotalLength, "bad_total_length"},
		{DropReason(NumDropReasons), "unknown"},
		{DropReason(255), "unknown"},
	}
	for _, tt := range tests {
		if got := tt.r.String(); got != tt.want {
			t.Errorf("DropReason(%d).String() = %q, want %q", tt.r, got, tt.want)
		}
	}
}
