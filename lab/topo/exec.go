package topo

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Command returns a command that runs inside the namespace (through
// `ip netns exec`, which also gives it the namespace's /sys). The caller sets
// its I/O and runs it.
func (n *NS) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", n.name, name}, args...)...)
}

// Run runs a command inside the namespace and returns its combined output;
// the error carries that output too.
func (n *NS) Run(ctx context.Context, name string, args ...string) ([]byte, error) {
	out, err := n.Command(ctx, name, args...).CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("topo: %s in %s: %w: %s", strings.Join(append([]string{name}, args...), " "), n.name, err, strings.TrimSpace(string(out)))
	}
	return out, nil
}

// Nft applies an nftables ruleset (the text `nft -f` reads) inside the
// namespace, atomically.
func (n *NS) Nft(ctx context.Context, ruleset string) error {
	cmd := n.Command(ctx, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(ruleset)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("topo: nft in %s: %w: %s", n.name, err, strings.TrimSpace(out.String()))
	}
	return nil
}

// Process is a long-lived process running in a namespace.
type Process struct {
	Name string
	NS   string
	PID  int
	// StartTime is the process's start time in clock ticks since boot
	// (/proc/PID/stat field 22); with PID it identifies the process, so
	// that a reused PID is never signalled.
	StartTime uint64
	Log       string

	cmd  *exec.Cmd     // nil when loaded from a state file
	done chan struct{} // closed when cmd has been waited for
	err  error         // Wait's result, valid once done is closed
}

// Start starts bin with args inside the namespace, its output appended to
// LogPath(name). The process gets its own session, so that a terminal's
// Ctrl-C reaches the topology's owner and not the process: the owner decides
// the order of shutdown. It outlives the calling program unless stopped.
func (n *NS) Start(name, bin string, args ...string) (*Process, error) {
	return n.start(name, append([]string{"ip", "netns", "exec", n.name, bin}, args...))
}

// StartNetOnly is Start for a process that must see the host's /sys and
// cgroup mounts: it enters the network namespace alone (nsenter --net)
// where `ip netns exec` also mounts a /sys of the namespace's own, in which
// kubelet finds no cgroup hierarchy.
func (n *NS) StartNetOnly(name, bin string, args ...string) (*Process, error) {
	return n.start(name, append([]string{"nsenter", "--net=" + filepath.Join(netnsDir, n.name), bin}, args...))
}

func (n *NS) start(name string, argv []string) (*Process, error) {
	t := n.topo
	logPath := t.LogPath(name)
	log, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, fmt.Errorf("topo: log for %s: %w", name, err)
	}
	defer log.Close()
	// exec.Command, not CommandContext: the process's life is bound to Stop,
	// not to the context of the call that started it.
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("topo: start %s in %s: %w", name, n.name, err)
	}
	p := &Process{Name: name, NS: n.name, PID: cmd.Process.Pid, Log: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	// `ip netns exec` and nsenter exec the program in place, so the PID and
	// start time are those of the program itself.
	if st, err := startTime(p.PID); err == nil {
		p.StartTime = st
	}
	t.mu.Lock()
	t.procs = append(t.procs, p)
	t.mu.Unlock()
	if err := t.save(); err != nil {
		return p, err
	}
	return p, nil
}

// Exited returns a channel closed when the process has exited, or nil for a
// process loaded from a state file (which this program cannot wait for).
func (p *Process) Exited() <-chan struct{} {
	if p.cmd == nil {
		return nil
	}
	return p.done
}

// ExitError returns how the process ended, once Exited is closed.
func (p *Process) ExitError() error {
	select {
	case <-p.done:
		return p.err
	default:
		return nil
	}
}

// Alive reports whether the process is still running.
func (p *Process) Alive() bool {
	if p.cmd != nil {
		select {
		case <-p.done:
			return false
		default:
			return true
		}
	}
	st, state, err := procStat(p.PID)
	return err == nil && st == p.StartTime && state != 'Z'
}

// Stop sends SIGTERM, waits up to timeout for the process to exit, then
// sends SIGKILL. It signals only this process: for one loaded from a state
// file, only if its PID still has the recorded start time.
func (p *Process) Stop(timeout time.Duration) error {
	if !p.Alive() {
		return nil
	}
	if err := p.Signal(syscall.SIGTERM); err != nil {
		return err
	}
	if p.wait(timeout) {
		return nil
	}
	return p.Kill()
}

// Kill sends SIGKILL and waits for the process to exit: it ends as a crash
// or the OOM killer would end it, with no chance to clean up. Like Stop, it
// signals only this process.
func (p *Process) Kill() error {
	if err := p.Signal(syscall.SIGKILL); err != nil {
		return err
	}
	if p.wait(5 * time.Second) {
		return nil
	}
	return fmt.Errorf("topo: %s (pid %d) survived SIGKILL", p.Name, p.PID)
}

// Signal sends sig to the process, such as SIGHUP to make a gateway reread
// its configuration. Like Stop, it signals only this process; one that has
// exited is not an error.
func (p *Process) Signal(sig syscall.Signal) error {
	var err error
	if p.cmd != nil {
		// os.Process signals through a pidfd, which cannot hit a reused PID.
		err = p.cmd.Process.Signal(sig)
	} else if p.Alive() {
		err = syscall.Kill(p.PID, sig)
	}
	if err != nil && !errors.Is(err, os.ErrProcessDone) && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("topo: signal %s (pid %d): %w", p.Name, p.PID, err)
	}
	return nil
}

func (p *Process) wait(timeout time.Duration) bool {
	if p.cmd != nil {
		select {
		case <-p.done:
			return true
		case <-time.After(timeout):
			return false
		}
	}
	deadline := time.Now().Add(timeout)
	for p.Alive() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}

func startTime(pid int) (uint64, error) {
	st, _, err := procStat(pid)
	return st, err
}

// procStat returns the start time and state of a process from
// /proc/PID/stat.
func procStat(pid int) (start uint64, state byte, err error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, err
	}
	// The command name (field 2) may hold spaces and parentheses; the
	// fields after its closing parenthesis are fixed.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, fmt.Errorf("topo: malformed /proc/%d/stat", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state); field 22 (starttime) is f[19].
	if len(f) < 20 || len(f[0]) != 1 {
		return 0, 0, fmt.Errorf("topo: malformed /proc/%d/stat", pid)
	}
	start, err = strconv.ParseUint(f[19], 10, 64)
	return start, f[0][0], err
}
