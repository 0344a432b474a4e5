package main

import (
	"os"
	"testing"

	"github.com/inlet-dev/inlet/internal/pgtest"
)

// The harness's PostgreSQL, for the tests that run a command against a real
// database (pgtest.NewDatabase starts it on first use only, so the tests
// that need none pay nothing).
func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }
