// Package tests holds Inlet's end-to-end tests: they build the real inlet
// binary, start it as separate processes against a real PostgreSQL, send real
// HTTP, and signal or kill the processes.
package tests
