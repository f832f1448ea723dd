package topo

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sync"
	"time"
)

// Options configures a Topology.
type Options struct {
	// Prefix starts the name of every namespace the topology creates, so that
	// a test and the lab can run side by side and leftovers are recognisable.
	// Lower-case letters, digits and '-', at most 16 characters.
	Prefix string
	// LogDir receives one log file per process started with NS.Start.
	// Default: a directory under os.TempDir().
	LogDir string
	// StateFile, if set, is rewritten after every change with what the
	// topology owns, so that Load can tear it down from another process.
	StateFile string
	// Binary is the snorkel binary that processes are usually started from;
	// default os.Executable().
	Binary string
	// StopTimeout is how long Close waits for a process to exit after SIGTERM
	// before it sends SIGKILL; default 5s.
	StopTimeout time.Duration
}

// Topology owns a set of namespaces and the processes running in them.
type Topology struct {
	opts Options

	mu    sync.Mutex
	nss   []*NS
	procs []*Process
	// saveMu keeps concurrent saves (processes started in parallel) from
	// sharing the temporary file.
	saveMu sync.Mutex
}

var prefixRE = regexp.MustCompile(`^[a-z0-9][-a-z0-9]{0,15}$`)

// ValidPrefix reports whether p can be used as Options.Prefix.
func ValidPrefix(p string) error {
	if !prefixRE.MatchString(p) {
		return fmt.Errorf("topo: prefix %q: use 1 to 16 lower-case letters, digits and '-', starting with a letter or digit", p)
	}
	return nil
}

// New returns an empty topology. It creates nothing on the system except the
// log directory.
func New(opts Options) (*Topology, error) {
	if err := ValidPrefix(opts.Prefix); err != nil {
		return nil, err
	}
	if opts.Binary == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("topo: find own binary: %w", err)
		}
		opts.Binary = exe
	}
	if opts.StopTimeout == 0 {
		opts.StopTimeout = 5 * time.Second
	}
	if opts.LogDir == "" {
		d, err := os.MkdirTemp("", "topo-"+opts.Prefix)
		if err != nil {
			return nil, fmt.Errorf("topo: log dir: %w", err)
		}
		opts.LogDir = d
	}
	if err := os.MkdirAll(opts.LogDir, 0o755); err != nil {
		return nil, fmt.Errorf("topo: log dir: %w", err)
	}
	return &Topology{opts: opts}, nil
}

// Prefix returns the namespace name prefix.
func (t *Topology) Prefix() string { return t.opts.Prefix }

// Binary returns the snorkel binary path.
func (t *Topology) Binary() string { return t.opts.Binary }

// LogDir returns the directory holding process logs.
func (t *Topology) LogDir() string { return t.opts.LogDir }

// NewNS creates the namespace Prefix+name with its loopback up.
func (t *Topology) NewNS(name string) (*NS, error) {
	full := t.opts.Prefix + name
	t.mu.Lock()
	if slices.ContainsFunc(t.nss, func(n *NS) bool { return n.name == full }) {
		t.mu.Unlock()
		return nil, fmt.Errorf("topo: namespace %s already in this topology", full)
	}
	// Recorded before it exists, so that a crash between the two still
	// leaves a record that Close or Load can act on.
	n := &NS{name: full, topo: t, handle: -1}
	t.nss = append(t.nss, n)
	t.mu.Unlock()
	if err := t.save(); err != nil {
		return nil, err
	}
	if err := n.create(); err != nil {
		return nil, err
	}
	return n, nil
}

// NS returns the namespace called Prefix+name, or nil.
func (t *Topology) NS(name string) *NS {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, n := range t.nss {
		if n.name == t.opts.Prefix+name {
			return n
		}
	}
	return nil
}

// Namespaces returns the topology's namespaces in creation order.
func (t *Topology) Namespaces() []*NS {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Clone(t.nss)
}

// Processes returns the processes started in the topology, in start order.
func (t *Topology) Processes() []*Process {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Clone(t.procs)
}

// Forget drops the processes of namespace ns that have exited from the
// topology's record, once something else stands in for them (a node's
// daemons started again after a test killed them): a status then lists
// what runs, and a teardown signals nothing for them.
func (t *Topology) Forget(ns *NS) error {
	t.mu.Lock()
	t.procs = slices.DeleteFunc(t.procs, func(p *Process) bool { return p.NS == ns.name && !p.Alive() })
	t.mu.Unlock()
	return t.save()
}

// Close stops every process (SIGTERM, then SIGKILL after StopTimeout) and
// deletes every namespace, with the devices in them. It carries on past
// errors and reports all of them; calling it again retries what failed.
func (t *Topology) Close() error {
	t.mu.Lock()
	procs := slices.Clone(t.procs)
	t.mu.Unlock()

	var errs []error
	var wg sync.WaitGroup
	perr := make([]error, len(procs))
	for i, p := range slices.Backward(procs) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			perr[i] = p.Stop(t.opts.StopTimeout)
		}()
	}
	wg.Wait()
	t.mu.Lock()
	t.procs = slices.DeleteFunc(t.procs, func(p *Process) bool { return !p.Alive() })
	t.mu.Unlock()
	errs = append(errs, perr...)

	for _, n := range slices.Backward(t.Namespaces()) {
		if err := n.delete(); err != nil {
			errs = append(errs, err)
			continue
		}
		t.mu.Lock()
		t.nss = slices.DeleteFunc(t.nss, func(m *NS) bool { return m == n })
		t.mu.Unlock()
	}
	if err := errors.Join(errs...); err != nil {
		if serr := t.save(); serr != nil {
			errs = append(errs, serr)
		}
		return errors.Join(errs...)
	}
	if t.opts.StateFile != "" {
		if err := os.Remove(t.opts.StateFile); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("topo: remove state file: %w", err)
		}
	}
	return nil
}

// Release closes the topology's handles on its namespaces and leaves them
// and its processes as they are: a topology loaded to be inspected must not
// keep the namespaces alive after another process deletes them.
func (t *Topology) Release() {
	for _, n := range t.Namespaces() {
		n.release()
	}
}

// LogPath returns the log file of a process with the given name.
func (t *Topology) LogPath(name string) string {
	return filepath.Join(t.opts.LogDir, name+".log")
}
