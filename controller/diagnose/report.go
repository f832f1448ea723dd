package diagnose

import "github.com/snorkel-net/snorkel/controller/internal/statusline"

// result is what one check found in one cluster.
type result struct {
	statusline.Section
	// verbose keeps the ✓ line of every object checked, not only the
	// summary.
	verbose bool
}

// newResult keeps each line's case: a line may start with a lower-case
// name (dnsd) or be an error as written.
func newResult(verbose bool) *result {
	return &result{Section: statusline.Section{KeepCase: true}, verbose: verbose}
}

// detail is a ✓ line about one object, kept with --verbose only.
func (r *result) detail(format string, args ...any) {
	if r.verbose {
		r.Success(format, args...)
	}
}
