package statusline

import (
	"bytes"
	"testing"
)

func TestSectionPrint(t *testing.T) {
	for _, tc := range []struct {
		name  string
		build func(*Section)
		want  string
	}{
		{"an empty section is a success", func(*Section) {}, " ✓ Title\n"},
		{"a warning marks the title ⚠", func(s *Section) {
			s.Success("fine")
			s.Warn("odd")
		}, " ⚠ Title\n ✓ Fine\n ⚠ Odd\n"},
		{"a failure marks the title ✗ whatever comes after", func(s *Section) {
			s.Fail("cannot read %s", "it")
			s.Warn("odd")
		}, " ✗ Title\n ✗ Cannot read it\n ⚠ Odd\n"},
		{"a ✗ added marks the title without failing", func(s *Section) {
			s.Add(Fail, "nothing here")
		}, " ✗ Title\n ✗ Nothing here\n"},
		{"a failure without a note marks the title ✗", func(s *Section) {
			s.Success("done")
			s.SetFailed()
		}, " ✗ Title\n ✓ Done\n"},
		{"KeepCase leaves the first letter", func(s *Section) {
			s.KeepCase = true
			s.Success("dnsd is up")
		}, " ✓ Title\n ✓ dnsd is up\n"},
		{"a multi-line note is indented under its text", func(s *Section) {
			s.Warn("first\nsecond")
		}, " ⚠ Title\n ⚠ First\n   second\n"},
		{"a note that does not start with a letter is kept", func(s *Section) {
			s.Success("%d pods", 3)
		}, " ✓ Title\n ✓ 3 pods\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var s Section
			tc.build(&s)
			var out bytes.Buffer
			s.Print(&out, "Title")
			if out.String() != tc.want {
				t.Errorf("printed %q, want %q", out.String(), tc.want)
			}
		})
	}
}

func TestFailedOnlyAfterFail(t *testing.T) {
	var s Section
	s.Add(Fail, "nothing")
	s.Warn("odd")
	if s.Failed() {
		t.Error("Add(Fail) failed the section")
	}
	s.Fail("broken")
	if !s.Failed() || s.Worst() != Fail {
		t.Errorf("after Fail: failed %v, worst %s", s.Failed(), s.Worst())
	}
	if n := len(s.Notes()); n != 3 {
		t.Errorf("%d notes, want 3", n)
	}
}
