//go:build race

package gateway

// raceEnabled is set under the race detector, which makes sync.Pool drop
// items at random so that pooled paths allocate.
const raceEnabled = true
