package perf

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"runtime"
	"strings"

	"golang.org/x/sys/unix"
)

// Machine describes the host a run measured on: numbers from different
// machines are not comparable, so every report carries this.
type Machine struct {
	CPUs     int    `json:"cpus"`
	CPUModel string `json:"cpuModel"`
	Kernel   string `json:"kernel"`
	Hostname string `json:"hostname"`
	// GoVersion is the toolchain the harness (and so the gateway binary
	// built with it) was built by.
	GoVersion string `json:"goVersion"`
	Iperf3    string `json:"iperf3"`
}

// ReadMachine describes this host; fields it cannot read stay empty.
func ReadMachine(ctx context.Context) Machine {
	m := Machine{CPUs: runtime.NumCPU(), GoVersion: runtime.Version()}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		m.CPUModel = cpuModel(b)
	}
	var u unix.Utsname
	if unix.Uname(&u) == nil {
		m.Kernel = unix.ByteSliceToString(u.Release[:])
	}
	m.Hostname, _ = os.Hostname()
	m.Iperf3 = binaryVersion(ctx, "iperf3", "--version")
	return m
}

// cpuModel returns the first "model name" of /proc/cpuinfo.
func cpuModel(cpuinfo []byte) string {
	sc := bufio.NewScanner(bytes.NewReader(cpuinfo))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return ""
}
