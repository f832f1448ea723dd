package nodes

import (
	"strings"
	"testing"
	"time"
)

func TestParseFailureKinds(t *testing.T) {
	got, err := ParseFailureKinds("link-cut, pod-delete")
	if err != nil || len(got) != 2 || got[0] != FailLink || got[1] != FailPod {
		t.Errorf("ParseFailureKinds: %v, %v", got, err)
	}
	if _, err := ParseFailureKinds("pod-delete,reboot"); err == nil || !strings.Contains(err.Error(), `"reboot"`) || !strings.Contains(err.Error(), "daemons-kill") {
		t.Errorf("an unknown kind: %v; want it named, with the kinds there are", err)
	}
}

// TestFailoverSummary checks the table's nearest-rank percentiles and
// survival shares, by kind and over all.
func TestFailoverSummary(t *testing.T) {
	var fs []Failover
	for i := 1; i <= 10; i++ {
		fs = append(fs, Failover{Kind: FailPod, Ping: time.Duration(i) * 100 * time.Millisecond, Elected: time.Second, AllStreams: 2 * time.Second, Streams: 20, Survived: 20})
	}
	fs = append(fs, Failover{Kind: FailNode, Ping: 3 * time.Second, Elected: 2 * time.Second, AllStreams: 4 * time.Second, Streams: 20, Survived: 19})
	got := FailoverSummary(fs)
	for _, want := range []string{
		"pod-delete    10  1.00/1.00/1.00 s        0.50/1.00/1.00 s        2.00/2.00/2.00 s        200/200 (100.0%)",
		"node-kill      1  2.00/2.00/2.00 s        3.00/3.00/3.00 s        4.00/4.00/4.00 s        19/20 (95.0%)",
		"all           11  1.00/2.00/2.00 s        0.60/3.00/3.00 s        2.00/4.00/4.00 s        219/220 (99.5%)",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("summary\n%s\nwants the line\n%s", got, want)
		}
	}
	if strings.Contains(got, "link-cut") {
		t.Errorf("summary lists a kind that never ran:\n%s", got)
	}
}
