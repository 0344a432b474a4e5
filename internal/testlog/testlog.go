// Package testlog holds what tests use to capture a service's log.
package testlog

import (
	"strings"
	"sync"
)

// Buffer is an io.Writer safe for concurrent use: the service's goroutines
// write its log, the test reads it with String.
type Buffer struct {
	mu  sync.Mutex
	buf strings.Builder
}

// Write appends p.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
