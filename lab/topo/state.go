package topo

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
)

// State is what a Topology owns, as written to Options.StateFile.
type State struct {
	Prefix     string         `json:"prefix"`
	LogDir     string         `json:"logDir"`
	Binary     string         `json:"binary"`
	Namespaces []string       `json:"namespaces"`
	Processes  []ProcessState `json:"processes"`
}

// ProcessState identifies a process of a State.
type ProcessState struct {
	Name      string `json:"name"`
	NS        string `json:"ns"`
	PID       int    `json:"pid"`
	StartTime uint64 `json:"startTime"`
	Log       string `json:"log"`
}

// State returns a snapshot of what the topology owns.
func (t *Topology) State() State {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := State{Prefix: t.opts.Prefix, LogDir: t.opts.LogDir, Binary: t.opts.Binary, Namespaces: []string{}, Processes: []ProcessState{}}
	for _, n := range t.nss {
		s.Namespaces = append(s.Namespaces, n.name)
	}
	for _, p := range t.procs {
		s.Processes = append(s.Processes, ProcessState{Name: p.Name, NS: p.NS, PID: p.PID, StartTime: p.StartTime, Log: p.Log})
	}
	return s
}

// save writes the state file, atomically, if there is one.
func (t *Topology) save() error {
	if t.opts.StateFile == "" {
		return nil
	}
	t.saveMu.Lock()
	defer t.saveMu.Unlock()
	b, err := json.MarshalIndent(t.State(), "", "  ")
	if err != nil {
		return fmt.Errorf("topo: encode state: %w", err)
	}
	tmp := t.opts.StateFile + ".tmp"
	if err := os.MkdirAll(filepath.Dir(tmp), 0o755); err != nil {
		return fmt.Errorf("topo: state dir: %w", err)
	}
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("topo: write state: %w", err)
	}
	if err := os.Rename(tmp, t.opts.StateFile); err != nil {
		return fmt.Errorf("topo: write state: %w", err)
	}
	return nil
}

// Load rebuilds the topology recorded in a state file by another process,
// so that it can be inspected or closed. Namespaces that no longer exist are
// kept in the record (Close skips them); processes cannot be waited for,
// only signalled.
func Load(stateFile string) (*Topology, error) {
	b, err := os.ReadFile(stateFile)
	if err != nil {
		return nil, fmt.Errorf("topo: read state: %w", err)
	}
	var s State
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("topo: state file %s: %w", stateFile, err)
	}
	t, err := New(Options{Prefix: s.Prefix, LogDir: s.LogDir, Binary: s.Binary, StateFile: stateFile})
	if err != nil {
		return nil, fmt.Errorf("topo: state file %s: %w", stateFile, err)
	}
	for _, name := range s.Namespaces {
		n := &NS{name: name, topo: t, handle: -1}
		if Exists(name) {
			if err := n.open(); err != nil {
				return nil, err
			}
		}
		t.nss = append(t.nss, n)
	}
	for _, p := range s.Processes {
		t.procs = append(t.procs, &Process{Name: p.Name, NS: p.NS, PID: p.PID, StartTime: p.StartTime, Log: p.Log})
	}
	return t, nil
}
