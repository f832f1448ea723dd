package perf

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// userHZ is the unit of the CPU times in /proc/PID/stat: USER_HZ, which
// Linux fixes at 100 on every architecture it reports to userspace.
const userHZ = 100

// hostCPU is a reading of the aggregate "cpu" line of /proc/stat, in
// USER_HZ ticks.
type hostCPU struct {
	total, idle, steal uint64
}

func readHostCPU() (hostCPU, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return hostCPU{}, fmt.Errorf("perf: %w", err)
	}
	return parseHostCPU(b)
}

// parseHostCPU reads the first line of /proc/stat: "cpu user nice system
// idle iowait irq softirq steal ...". Idle time counts idle and iowait;
// steal, the time a virtual machine's hypervisor ran something else while
// the guest wanted its CPU, counts as busy.
func parseHostCPU(b []byte) (hostCPU, error) {
	line, _, _ := bytes.Cut(b, []byte("\n"))
	f := strings.Fields(string(line))
	if len(f) < 6 || f[0] != "cpu" {
		return hostCPU{}, fmt.Errorf("perf: unexpected /proc/stat line %q", line)
	}
	var c hostCPU
	for i, s := range f[1:] {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return hostCPU{}, fmt.Errorf("perf: /proc/stat field %d %q: %w", i+1, s, err)
		}
		// guest and guest_nice (fields 9 and 10) are already counted in
		// user and nice.
		if i < 8 {
			c.total += v
		}
		switch i {
		case 3, 4:
			c.idle += v
		case 7:
			c.steal = v
		}
	}
	return c, nil
}

// busySince returns the percentage of all cores' time that was busy
// between an earlier reading and c.
func (c hostCPU) busySince(before hostCPU) float64 {
	dt := c.total - before.total
	if dt == 0 {
		return 0
	}
	return 100 * (1 - float64(c.idle-before.idle)/float64(dt))
}

// stealSince returns the percentage of all cores' time that the
// hypervisor took between an earlier reading and c: a measurement with
// much of it ran on a machine slower than the one the others saw.
func (c hostCPU) stealSince(before hostCPU) float64 {
	dt := c.total - before.total
	if dt == 0 {
		return 0
	}
	return 100 * float64(c.steal-before.steal) / float64(dt)
}

// processTicks returns utime+stime of a process, all threads, in USER_HZ
// ticks.
func processTicks(pid int) (uint64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, fmt.Errorf("perf: %w", err)
	}
	return parseProcessTicks(b)
}

// parseProcessTicks reads fields 14 (utime) and 15 (stime) of a
// /proc/PID/stat line. The command name, field 2, may hold spaces and
// parentheses, so fields are counted from its last closing parenthesis.
func parseProcessTicks(b []byte) (uint64, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("perf: malformed /proc/PID/stat")
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3, so fields 14 and 15 are f[11] and f[12].
	if len(f) < 13 {
		return 0, fmt.Errorf("perf: malformed /proc/PID/stat: %d fields", len(f)+2)
	}
	u, err1 := strconv.ParseUint(f[11], 10, 64)
	s, err2 := strconv.ParseUint(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("perf: malformed /proc/PID/stat: utime %q stime %q", f[11], f[12])
	}
	return u + s, nil
}

// loadAvg1 returns the one-minute load average, or 0 if it cannot be read.
func loadAvg1() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}

// idleResult is what waitIdle saw.
type idleResult struct {
	Busy   float64 // busy % of all cores over the last second sampled
	Waited time.Duration
	// GaveUp is set when the host was still busier than asked at the
	// deadline.
	GaveUp bool
}

// waitIdle samples the host's CPU over one second at a time until it is at
// most maxBusy percent busy, pausing between samples so that the sampling
// does not itself keep a core awake, for at most limit.
func waitIdle(ctx context.Context, maxBusy float64, limit time.Duration) (idleResult, error) {
	start := time.Now()
	for {
		a, err := readHostCPU()
		if err != nil {
			return idleResult{}, err
		}
		if err := sleep(ctx, time.Second); err != nil {
			return idleResult{}, err
		}
		b, err := readHostCPU()
		if err != nil {
			return idleResult{}, err
		}
		r := idleResult{Busy: b.busySince(a), Waited: time.Since(start)}
		if r.Busy <= maxBusy {
			return r, nil
		}
		if r.Waited >= limit {
			r.GaveUp = true
			return r, nil
		}
		if err := sleep(ctx, 2*time.Second); err != nil {
			return idleResult{}, err
		}
	}
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// processPeakRSS returns a process's peak resident set size in bytes:
// VmHWM of /proc/PID/status.
func processPeakRSS(pid int) (uint64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, fmt.Errorf("perf: %w", err)
	}
	return parsePeakRSS(b)
}

// parsePeakRSS reads the "VmHWM:  1234 kB" line of /proc/PID/status.
func parsePeakRSS(status []byte) (uint64, error) {
	for line := range bytes.Lines(status) {
		v, ok := bytes.CutPrefix(line, []byte("VmHWM:"))
		if !ok {
			continue
		}
		f := strings.Fields(string(v))
		if len(f) != 2 || f[1] != "kB" {
			return 0, fmt.Errorf("perf: malformed VmHWM line %q", bytes.TrimSpace(line))
		}
		kb, err := strconv.ParseUint(f[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("perf: malformed VmHWM line %q", bytes.TrimSpace(line))
		}
		return kb << 10, nil
	}
	return 0, fmt.Errorf("perf: no VmHWM in /proc/PID/status (a kernel thread, or a process that exited?)")
}
