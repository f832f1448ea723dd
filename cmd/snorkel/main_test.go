package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"testing"
)

// runMainEnv set in the environment makes the test binary run main with
// its arguments, so that tests run the command line as users type it.
const runMainEnv = "SNORKEL_TEST_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(runMainEnv) == "1" {
		os.Args = append([]string{"snorkel"}, os.Args[1:]...)
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// snorkelRun is the outcome of one command line.
type snorkelRun struct {
	stdout, stderr string
	code           int
}

// runSnorkel runs `snorkel args...` in a child process with env added to
// the environment.
func runSnorkel(t *testing.T, env []string, args ...string) snorkelRun {
	t.Helper()
	return runSnorkelIn(t, "", env, args...)
}

// runSnorkelIn is runSnorkel in directory dir ("": this one).
func runSnorkelIn(t *testing.T, dir string, env []string, args ...string) snorkelRun {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), os.Args[0], args...)
	cmd.Dir = dir
	cmd.Env = append(append(os.Environ(), runMainEnv+"=1"), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := snorkelRun{stdout: stdout.String(), stderr: stderr.String()}
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		r.code = exit.ExitCode()
	case err != nil:
		t.Fatalf("snorkel %q: %v", args, err)
	}
	return r
}
