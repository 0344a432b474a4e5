//go:build race

package filter_test

// raceEnabled is whether the race detector is on: tests that time a
// regexp scale their inputs down under -race, whose overhead is ~13× on
// regexp.
const raceEnabled = true
