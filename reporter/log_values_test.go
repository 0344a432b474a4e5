package reporter_test

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/inlet-dev/inlet/reporter"
)

type reviewBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *reviewBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}
func (s *reviewBuf) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

// job_attempts.error_class has no CHECK, and every consumer role may INSERT
// it. A row whose class is free text (a consumer outside the SDK writing its
// error into the class) is reported as handler_error, without its value in
// the log or the report: error text stays in Postgres. (Found by a review: the value was
// logged verbatim.)
func TestReporterDoesNotLogFreeTextErrorClass(t *testing.T) {
	t.Parallel()
	d, cp := newDataPlane(t), newControlPlane(t)
	bad, good := d.job(t), d.job(t)
	leak := "dial tcp 10.1.2.3:443 customer cus_SECRET alice@example.com"
	d.attempt(t, bad, 1, "failed", leak, errorText)
	d.attempt(t, good, 1, "failed", "http_5xx", errorText)
	var logs reviewBuf
	startReporter(t, d, cp, func(c *reporter.Config) { c.Logger = slog.New(slog.NewTextHandler(&logs, nil)) })
	cp.waitStored(t, 2) // the free-text class is reported as handler_error
	if out := logs.String(); strings.Contains(out, "cus_SECRET") || strings.Contains(out, "alice@example.com") {
		t.Fatalf("reporter log carries the row's free-text error_class:\n%s", out)
	}
}
