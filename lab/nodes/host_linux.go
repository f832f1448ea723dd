package nodes

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// cgroupFS is where the host mounts its cgroup v1 hierarchies.
const cgroupFS = "/sys/fs/cgroup"

// cgroupHierarchies are the v1 hierarchies a node's cgroup root must exist
// in before kubelet starts; the cgroup2 mount of a hybrid host ("unified")
// is not one.
func cgroupHierarchies() ([]string, error) {
	entries, err := os.ReadDir(cgroupFS)
	if err != nil {
		return nil, fmt.Errorf("nodes: cgroups: %w", err)
	}
	var out []string
	for _, e := range entries {
		if e.IsDir() && e.Name() != "unified" {
			out = append(out, filepath.Join(cgroupFS, e.Name()))
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("nodes: no cgroup v1 hierarchy under %s", cgroupFS)
	}
	return out, nil
}

// makeCgroup creates a node's cgroup root in every hierarchy. A new
// cpuset has no CPUs or memory nodes until given its parent's.
func makeCgroup(root string) error {
	hs, err := cgroupHierarchies()
	if err != nil {
		return err
	}
	for _, h := range hs {
		dir := filepath.Join(h, root)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("nodes: cgroup %s: %w", dir, err)
		}
		if filepath.Base(h) != "cpuset" {
			continue
		}
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			b, err := os.ReadFile(filepath.Join(h, f))
			if err != nil {
				return fmt.Errorf("nodes: cgroup %s: %w", h, err)
			}
			if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
				return fmt.Errorf("nodes: cgroup %s: %w", dir, err)
			}
		}
	}
	return nil
}

// cgroupEnter is a shell prologue that moves the shell into the node's
// cgroup root in every hierarchy before it execs the node's program, so
// that the program and everything it starts (containerd's shims, the
// containers) stay inside, where the teardown finds them.
func cgroupEnter(root string) (string, error) {
	hs, err := cgroupHierarchies()
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for _, h := range hs {
		fmt.Fprintf(&b, "echo $$ > %s && ", filepath.Join(h, root, "cgroup.procs"))
	}
	b.WriteString(`exec "$0" "$@"`)
	return b.String(), nil
}

// cgroupPIDs lists every process in a cgroup root and below it, in any
// hierarchy.
func cgroupPIDs(root string) ([]int, error) {
	hs, err := cgroupHierarchies()
	if err != nil {
		return nil, err
	}
	seen := map[int]bool{}
	for _, h := range hs {
		err := filepath.WalkDir(filepath.Join(h, root), func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				if errors.Is(err, fs.ErrNotExist) {
					return nil
				}
				return err
			}
			if d.IsDir() || d.Name() != "cgroup.procs" {
				return nil
			}
			b, err := os.ReadFile(p)
			if err != nil {
				return nil
			}
			for _, f := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(f); err == nil {
					seen[pid] = true
				}
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("nodes: cgroup %s: %w", root, err)
		}
	}
	var out []int
	for pid := range seen {
		out = append(out, pid)
	}
	slices.Sort(out)
	return out, nil
}

// killCgroup kills every process in a node's cgroup root until none is
// left: the node's containerd, kubelet and kube-proxy, the shims and the
// containers, all of which the lab started.
func killCgroup(root string, timeout time.Duration) error {
	end := time.Now().Add(timeout)
	for {
		pids, err := cgroupPIDs(root)
		if err != nil || len(pids) == 0 {
			return err
		}
		if time.Now().After(end) {
			return fmt.Errorf("nodes: processes %v of cgroup %s survived SIGKILL for %s", pids, root, timeout)
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// removeCgroup removes a node's cgroup root and every cgroup kubelet made
// below it, deepest first, in every hierarchy.
func removeCgroup(root string) error {
	hs, err := cgroupHierarchies()
	if err != nil {
		return err
	}
	var errs []error
	for _, h := range hs {
		var dirs []string
		_ = filepath.WalkDir(filepath.Join(h, root), func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		for _, d := range slices.Backward(dirs) {
			if err := unix.Rmdir(d); err != nil && !errors.Is(err, unix.ENOENT) {
				errs = append(errs, fmt.Errorf("nodes: rmdir %s: %w", d, err))
			}
		}
	}
	return errors.Join(errs...)
}

// unmountUnder detaches every mount at or below dir, deepest first: the
// pods' volumes kubelet mounted, and the rootfs, shm and network namespace
// mounts of containerd.
func unmountUnder(dir string) error {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return fmt.Errorf("nodes: %w", err)
	}
	defer f.Close()
	var points []string
	s := bufio.NewScanner(f)
	s.Buffer(make([]byte, 64*1024), 1024*1024)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) < 5 {
			continue
		}
		p := unescapeMount(fields[4])
		if p == dir || strings.HasPrefix(p, dir+"/") {
			points = append(points, p)
		}
	}
	if err := s.Err(); err != nil {
		return fmt.Errorf("nodes: mountinfo: %w", err)
	}
	slices.SortFunc(points, func(a, b string) int { return len(b) - len(a) })
	var errs []error
	for _, p := range points {
		if err := unix.Unmount(p, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("nodes: unmount %s: %w", p, err))
		}
	}
	return errors.Join(errs...)
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// kubeletSysctls are the host-wide settings kubelet rewrites when it
// starts (to 1, 10 and 1); the lab records and restores them.
var kubeletSysctls = []string{"vm.overcommit_memory", "kernel.panic", "kernel.panic_on_oops"}

func sysctlPath(key string) string {
	return filepath.Join("/proc/sys", strings.ReplaceAll(key, ".", "/"))
}

// readSysctls reads the host's values of kubeletSysctls.
func readSysctls() (map[string]string, error) {
	out := map[string]string{}
	for _, k := range kubeletSysctls {
		b, err := os.ReadFile(sysctlPath(k))
		if err != nil {
			return nil, fmt.Errorf("nodes: sysctl %s: %w", k, err)
		}
		out[k] = strings.TrimSpace(string(b))
	}
	return out, nil
}

// restoreSysctls puts recorded values back where they differ, and says
// which it restored.
func restoreSysctls(want map[string]string) ([]string, error) {
	var restored []string
	var errs []error
	for _, k := range kubeletSysctls {
		v, ok := want[k]
		if !ok {
			continue
		}
		b, err := os.ReadFile(sysctlPath(k))
		if err == nil && strings.TrimSpace(string(b)) == v {
			continue
		}
		if err := os.WriteFile(sysctlPath(k), []byte(v), 0o644); err != nil {
			errs = append(errs, fmt.Errorf("nodes: restore sysctl %s=%s: %w", k, v, err))
			continue
		}
		restored = append(restored, k+"="+v)
	}
	return restored, errors.Join(errs...)
}
