package lab

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"time"
)

// Probes are whereami's clients: the one-shot checks `snorkel verify` runs
// as pods (snorkel lab-pod fetch and resolve). Each retries until its
// expectation holds or its time is up, since an export takes seconds to
// reach the other clusters' DNS, and reports in one line.

// retryInterval is the pause between a probe's attempts.
const retryInterval = time.Second

// Fetch is one HTTP check of a whereami server.
type Fetch struct {
	URL string
	// Cluster and Pod, if set, are the cluster and pod that must answer.
	Cluster, Pod string
	// ClientIn, if valid, must hold the client address the server saw.
	ClientIn netip.Prefix
	// Bytes, if above 0, is a transfer from the server that must also
	// arrive whole (GET /bytes): packets of full size, where a single
	// reply fits in one.
	Bytes int
	// Timeout bounds each attempt (0: requestTimeout); RetryUntil all
	// of them (0: one attempt).
	Timeout, RetryUntil time.Duration
}

// Run fetches until the reply meets every expectation, and returns a line
// saying who answered; the error is the last attempt's reason.
func (f Fetch) Run(ctx context.Context, client *http.Client) (string, error) {
	return retry(ctx, f.RetryUntil, func(ctx context.Context) (string, error) {
		ctx, cancel := attemptContext(ctx, f.Timeout)
		defer cancel()
		r, err := fetchWhereami(ctx, client, f.URL)
		if err != nil {
			return "", err
		}
		if f.Cluster != "" && r.Cluster != f.Cluster {
			return "", fmt.Errorf("%s answered from cluster %q, want %q", f.URL, r.Cluster, f.Cluster)
		}
		if f.Pod != "" && r.Pod != f.Pod {
			return "", fmt.Errorf("%s answered from pod %q, want %q", f.URL, r.Pod, f.Pod)
		}
		if f.ClientIn.IsValid() {
			client, err := netip.ParseAddrPort(r.Client)
			if err != nil {
				return "", fmt.Errorf("%s reported client %q, not an address and port", f.URL, r.Client)
			}
			if !f.ClientIn.Contains(client.Addr().Unmap()) {
				return "", fmt.Errorf("%s saw the client as %s, want an address in %s", f.URL, client.Addr(), f.ClientIn)
			}
		}
		line := fmt.Sprintf("%s answered from pod %s in cluster %s, client %s", f.URL, r.Pod, r.Cluster, r.Client)
		if f.Bytes > 0 {
			u, err := url.Parse(f.URL)
			if err != nil {
				return "", err
			}
			u.Path, u.RawQuery = "/bytes", fmt.Sprintf("n=%d", f.Bytes)
			body, err := httpGet(ctx, client, u.String())
			if err != nil {
				return "", fmt.Errorf("%s: %w", u, err)
			}
			if body.Len() != f.Bytes {
				return "", fmt.Errorf("%s: %d bytes arrived, want %d", u, body.Len(), f.Bytes)
			}
			line += fmt.Sprintf("; %d bytes arrived", f.Bytes)
		}
		return line, nil
	})
}

// Resolve is one DNS check.
type Resolve struct {
	// Name is looked up as a fully qualified name: the pod's search
	// domains are not tried.
	Name string
	// In, if valid, must hold every address; Want, if valid, must be one
	// of them.
	In   netip.Prefix
	Want netip.Addr
	// Timeout bounds each attempt (0: requestTimeout); RetryUntil all
	// of them (0: one attempt).
	Timeout, RetryUntil time.Duration
}

// Run resolves until the answer meets the expectation, and returns a line
// with the addresses.
func (r Resolve) Run(ctx context.Context, resolver *net.Resolver) (string, error) {
	fqdn := r.Name
	if !strings.HasSuffix(fqdn, ".") {
		fqdn += "."
	}
	return retry(ctx, r.RetryUntil, func(ctx context.Context) (string, error) {
		ctx, cancel := attemptContext(ctx, r.Timeout)
		defer cancel()
		addrs, err := resolver.LookupNetIP(ctx, "ip", fqdn)
		if err != nil {
			return "", err
		}
		for i, a := range addrs {
			addrs[i] = a.Unmap()
		}
		if r.Want.IsValid() && !slices.Contains(addrs, r.Want) {
			return "", fmt.Errorf("%s resolved to %s, want %s", r.Name, joinAddrs(addrs), r.Want)
		}
		if r.In.IsValid() {
			for _, a := range addrs {
				if !r.In.Contains(a) {
					return "", fmt.Errorf("%s resolved to %s, want addresses in %s", r.Name, joinAddrs(addrs), r.In)
				}
			}
		}
		return fmt.Sprintf("%s resolved to %s", r.Name, joinAddrs(addrs)), nil
	})
}

func joinAddrs(addrs []netip.Addr) string {
	s := make([]string, len(addrs))
	for i, a := range addrs {
		s[i] = a.String()
	}
	return strings.Join(s, ",")
}

// attemptContext bounds one attempt by timeout, or by requestTimeout if
// it is 0.
func attemptContext(ctx context.Context, timeout time.Duration) (context.Context, context.CancelFunc) {
	if timeout == 0 {
		timeout = requestTimeout
	}
	return context.WithTimeout(ctx, timeout)
}

// retry calls attempt until it succeeds or until has passed, pausing
// retryInterval between attempts, and returns the last outcome.
func retry(ctx context.Context, until time.Duration, attempt func(context.Context) (string, error)) (string, error) {
	deadline := time.Now().Add(until)
	for {
		line, err := attempt(ctx)
		if err == nil {
			return line, nil
		}
		if time.Now().Add(retryInterval).After(deadline) {
			return "", err
		}
		select {
		case <-ctx.Done():
			return "", errors.Join(err, ctx.Err())
		case <-time.After(retryInterval):
		}
	}
}
