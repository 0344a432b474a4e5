//go:build !unix

package main

// processAlive cannot tell here: every process is taken as alive.
func processAlive(string) bool { return true }
