// Package podstate says what a pod is doing, for the commands that run
// short-lived pods of their own (verify's checks, diagnose's probes) and
// must tell a user why one did not do its job.
package podstate

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// Ready reports whether p's Ready condition is true.
func Ready(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// Describe says what p is doing, in kubectl get pods' words where it waits
// or failed.
func Describe(p *corev1.Pod) string {
	for _, cs := range p.Status.ContainerStatuses {
		switch {
		case cs.State.Waiting != nil:
			return strings.TrimSpace(cs.State.Waiting.Reason + " " + cs.State.Waiting.Message)
		case cs.State.Terminated != nil:
			return fmt.Sprintf("%s, exit code %d", cs.State.Terminated.Reason, cs.State.Terminated.ExitCode)
		}
	}
	for _, c := range p.Status.Conditions {
		if c.Status != corev1.ConditionTrue && c.Message != "" {
			return fmt.Sprintf("%s: %s", p.Status.Phase, c.Message)
		}
	}
	return string(p.Status.Phase)
}

// Sleep waits d, or less if ctx ends first, and then returns ctx's error.
func Sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}
