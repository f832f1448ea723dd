// Package kubetest starts kubelocal API servers for tests: Start brings
// several up at once and stops them when the test ends. It is its own
// package so that only test binaries link package testing; kubelocal,
// which the lab ships in the snorkel binary, does not.
//
// Start is safe to call from parallel tests; each call starts its own
// servers.
package kubetest
