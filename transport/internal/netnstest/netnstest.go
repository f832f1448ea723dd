// Package netnstest helps the transports' tests open sockets inside a
// network namespace.
package netnstest

import (
	"runtime"
	"testing"

	"github.com/vishvananda/netns"
)

// In runs fn with the calling goroutine's thread in namespace name, so that
// sockets fn opens belong to it.
func In(t *testing.T, name string, fn func()) {
	t.Helper()
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		t.Fatal(err)
	}
	defer orig.Close()
	target, err := netns.GetFromName(name)
	if err != nil {
		runtime.UnlockOSThread()
		t.Fatal(err)
	}
	defer target.Close()
	if err := netns.Set(target); err != nil {
		runtime.UnlockOSThread()
		t.Fatal(err)
	}
	fn()
	if err := netns.Set(orig); err != nil {
		// Leave the thread locked: the runtime discards it when this
		// goroutine ends, rather than reuse it in the wrong namespace.
		t.Fatalf("returning to the original netns: %v", err)
	}
	runtime.UnlockOSThread()
}
