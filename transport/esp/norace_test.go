//go:build !race

package esp

const raceEnabled = false
