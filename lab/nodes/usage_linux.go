package nodes

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// Usage is what one of Snorkel's processes on a lab node has cost since it
// started: the figures the DaemonSets' resource requests come from.
type Usage struct {
	Node    string
	Command string // agent, route-agent, dnsd
	PID     int
	RSS     uint64 // bytes
	PeakRSS uint64 // bytes
	CPU     time.Duration
	Age     time.Duration
}

// Millicores is the process's average CPU since it started, in
// thousandths of a core.
func (u Usage) Millicores() float64 {
	if u.Age <= 0 {
		return 0
	}
	return 1000 * u.CPU.Seconds() / u.Age.Seconds()
}

// userHZ is the unit of /proc/PID/stat's times, 100 on every Linux
// architecture Snorkel runs on.
const userHZ = 100

// snorkelUsage finds Snorkel's processes (the image's /snorkel) in the
// cgroups of nodes and reads what each has cost.
func snorkelUsage(prefix string, nodes []string) ([]Usage, error) {
	uptime, err := os.ReadFile("/proc/uptime")
	if err != nil {
		return nil, fmt.Errorf("nodes: %w", err)
	}
	up, err := strconv.ParseFloat(strings.Fields(string(uptime))[0], 64)
	if err != nil {
		return nil, fmt.Errorf("nodes: /proc/uptime: %w", err)
	}
	var out []Usage
	for _, n := range nodes {
		pids, err := cgroupPIDs(prefix + n)
		if err != nil {
			return nil, err
		}
		for _, pid := range pids {
			u, ok := processUsage(pid, up)
			if ok {
				u.Node = n
				out = append(out, u)
			}
		}
	}
	return out, nil
}

// processUsage reads pid if it runs /snorkel; a process that exits while
// it is read is skipped.
func processUsage(pid int, uptime float64) (Usage, bool) {
	dir := "/proc/" + strconv.Itoa(pid)
	cmdline, err := os.ReadFile(dir + "/cmdline")
	if err != nil {
		return Usage{}, false
	}
	argv := bytes.Split(bytes.TrimRight(cmdline, "\x00"), []byte{0})
	if len(argv) < 2 || string(argv[0]) != "/snorkel" {
		return Usage{}, false
	}
	stat, err := os.ReadFile(dir + "/stat")
	if err != nil {
		return Usage{}, false
	}
	// Fields after the command name, which is in parentheses and may
	// hold spaces: utime and stime are fields 14 and 15, starttime 22.
	rest := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
	if len(rest) < 20 {
		return Usage{}, false
	}
	utime, _ := strconv.ParseUint(rest[11], 10, 64)
	stime, _ := strconv.ParseUint(rest[12], 10, 64)
	start, _ := strconv.ParseUint(rest[19], 10, 64)
	u := Usage{
		Command: string(argv[1]),
		PID:     pid,
		CPU:     time.Duration(utime+stime) * time.Second / userHZ,
		Age:     time.Duration((uptime - float64(start)/userHZ) * float64(time.Second)),
	}
	status, err := os.ReadFile(dir + "/status")
	if err != nil {
		return Usage{}, false
	}
	for _, line := range strings.Split(string(status), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		f := strings.Fields(v)
		if len(f) == 0 {
			continue
		}
		kb, _ := strconv.ParseUint(f[0], 10, 64)
		switch k {
		case "VmRSS":
			u.RSS = kb << 10
		case "VmHWM":
			u.PeakRSS = kb << 10
		}
	}
	return u, true
}
