package main

import (
	"flag"
	"fmt"
	"strings"
)

// A global flag may come before the command, as subctl's kubeconfig
// flags do (`snorkel --context kind-c1 join …`): it is handed to the
// command as if it followed it.
type globalFlag struct {
	name, arg, usage string
}

// globalFlags are the flags taken before the command: those of subctl's
// that name the cluster to act on.
var globalFlags = []globalFlag{
	{"kubeconfig", "FILE", "kubeconfig file (default $KUBECONFIG or ~/.kube/config)"},
	{"context", "NAME", "kubeconfig context (default the current context)"},
	{"contexts", "C1,C2", "kubeconfig contexts, for the commands that act on several (show)"},
}

// setting is one global flag as given before the command.
type setting struct{ name, value string }

// splitCommandLine splits the command line (without the program name) into
// the global flags before the command, the command's name and its own
// arguments. A help flag or "help" in the command's place returns
// flag.ErrHelp.
func splitCommandLine(args []string) (global []setting, name string, rest []string, err error) {
	for len(args) > 0 {
		a := args[0]
		if a == "-h" || a == "-help" || a == "--help" || a == "help" {
			return nil, "", nil, flag.ErrHelp
		}
		if !strings.HasPrefix(a, "-") || a == "-" {
			return global, a, args[1:], nil
		}
		if a == "--" {
			break
		}
		n, v, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !isGlobalFlag(n) {
			return nil, "", nil, fmt.Errorf("unknown global flag %s before the command: the global flags are %s; the command's own flags go after it (snorkel COMMAND [flags])", a, globalFlagNames())
		}
		args = args[1:]
		if !hasValue {
			if len(args) == 0 {
				return nil, "", nil, fmt.Errorf("global flag --%s needs a value, e.g. --%s=%s", n, n, globalFlagArg(n))
			}
			v, args = args[0], args[1:]
		}
		global = append(global, setting{n, v})
	}
	return nil, "", nil, fmt.Errorf("a command must follow the global flags, e.g. `snorkel --context C show connections`")
}

// withGlobalFlags hands the global flags to the command after its own
// arguments, but before a "--" that ends its flags. A flag the command's
// arguments give too is left out: the one after the command wins, as in
// subctl, where the last of a flag's values counts.
func withGlobalFlags(args []string, global []setting) []string {
	if len(global) == 0 {
		return args
	}
	end := len(args)
	for i, a := range args {
		if a == "--" {
			end = i
			break
		}
	}
	given := map[string]bool{}
	for _, a := range args[:end] {
		if strings.HasPrefix(a, "-") {
			n, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
			given[n] = true
		}
	}
	out := append([]string(nil), args[:end]...)
	for _, g := range global {
		if !given[g.name] {
			out = append(out, "--"+g.name+"="+g.value)
		}
	}
	return append(out, args[end:]...)
}

func isGlobalFlag(name string) bool {
	for _, f := range globalFlags {
		if f.name == name {
			return true
		}
	}
	return false
}

func globalFlagArg(name string) string {
	for _, f := range globalFlags {
		if f.name == name {
			return f.arg
		}
	}
	return ""
}

func globalFlagNames() string {
	names := make([]string, len(globalFlags))
	for i, f := range globalFlags {
		names[i] = "--" + f.name
	}
	return strings.Join(names, ", ")
}
