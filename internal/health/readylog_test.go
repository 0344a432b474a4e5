package health

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/inlet-dev/inlet/internal/testlog"
)

// A failed readiness is logged once per change of state, not per probe:
// anyone who reaches a probe could otherwise fill the log while a
// dependency is down. Before the fix (review helper-200) each of the three
// failed probes below logged "not ready", and the recovery nothing.
func TestReadyzLogsOncePerChange(t *testing.T) {
	var down atomic.Bool
	logs := &testlog.Buffer{}
	s, err := Start(context.Background(), "127.0.0.1:0", func(context.Context) error {
		if down.Load() {
			return errors.New("database is read-only")
		}
		return nil
	}, nil, slog.New(slog.NewJSONHandler(logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Stop(context.Background()) }()
	for _, d := range []bool{false, true, true, true, false, false} {
		down.Store(d)
		resp, err := http.Get("http://" + s.Addr() + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if want := map[bool]int{false: 200, true: 503}[d]; resp.StatusCode != want {
			t.Fatalf("/readyz %d, want %d", resp.StatusCode, want)
		}
	}
	count := map[string]int{}
	for line := range strings.SplitSeq(logs.String(), "\n") {
		var l struct{ Msg string }
		if json.Unmarshal([]byte(line), &l) == nil {
			count[l.Msg]++
		}
	}
	if count["not ready"] != 1 || count["ready again"] != 1 {
		t.Fatalf("log lines %v, want one \"not ready\" and one \"ready again\":\n%s", count, logs.String())
	}
}
