package kubetest

import (
	"context"
	"sync"
	"testing"

	"github.com/snorkel-net/snorkel/controller/kubelocal"
)

// Start starts one Server per Options at once, fails t if any does not
// come up, and stops them all when t ends.
func Start(t testing.TB, opts ...kubelocal.Options) []*kubelocal.Server {
	t.Helper()
	servers := make([]*kubelocal.Server, len(opts))
	errs := make([]error, len(opts))
	var wg sync.WaitGroup
	for i, o := range opts {
		wg.Go(func() { servers[i], errs[i] = kubelocal.Start(context.Background(), o) })
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
