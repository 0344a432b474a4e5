package httpforward_test

import (
	"os"
	"testing"

	"github.com/inlet-dev/inlet/internal/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }
