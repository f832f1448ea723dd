package kubelocal

import (
	"context"
	"sync"
	"testing"
)

// ForTest starts one Server per Options at once, fails t if any does not
// come up, and stops them all when t ends.
func ForTest(t testing.TB, opts ...Options) []*Server {
	t.Helper()
	servers := make([]*Server, len(opts))
	errs := make([]error, len(opts))
	var wg sync.WaitGroup
	for i, o := range opts {
		wg.Go(func() { servers[i], errs[i] = Start(context.Background(), o) })
	}
	wg.Wait()
	for _, s := range servers {
		if s != nil {
			t.Cleanup(s.Stop)
		}
	}
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	return servers
}
