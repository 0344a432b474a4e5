//go:build !race

package filter_test

// raceEnabled is whether the race detector is on (see race_on_test.go).
const raceEnabled = false
