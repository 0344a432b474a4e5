//go:build !linux

package main

// takeTerminal is Linux only (see terminal_linux.go).
func takeTerminal() (restore func()) { return func() {} }
