// Package statusline prints the status lines of subctl's commands: " ✓ text",
// " ⚠ text", " ✗ text", and a step's title carrying the worst mark of the
// notes under it. A user who reads subctl's output, or a script that greps
// it, reads Snorkel's commands (show, gather, diagnose, uninstall) the same
// way.
//
// A Section is owned by one goroutine; nothing is shared between Sections.
package statusline
