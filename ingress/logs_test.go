package ingress_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/ingress"
	"github.com/inlet-dev/inlet/internal/database"
	"github.com/inlet-dev/inlet/internal/pgtest"
	"github.com/inlet-dev/inlet/schema"
)

// A sender cannot grow the log by the size of what it sends: ten requests for
// a 60 KB unknown source name write a few short lines at most (the name cut,
// with its length; repeats within a second held back, counted in the next
// line), and a 300 KB event id writes a line of ordinary size.
func TestLogsStayBoundedWhateverTheSenderSends(t *testing.T) {
	t.Parallel()
	b := setupOn(t, pgtest.NewDatabase(t), 1<<20)
	name := "CANARYsrc" + strings.Repeat("n", 60<<10)
	for range 10 {
		req, _ := http.NewRequest(http.MethodPost, b.url+"/webhooks/"+name, strings.NewReader("{}"))
		if code, answer, _ := do(t, req); code != 404 || !strings.Contains(answer, "unknown_source") {
			t.Fatalf("unknown source: %d %s", code, answer)
		}
	}
	logs := b.logs.String()
	lines := strings.Count(logs, `"reason":"unknown_source"`)
	t.Logf("10 requests for a %d-byte source name: %d log lines, %d bytes", len(name), lines, len(logs))
	// One line a second: more than one only if the requests took over a second.
	if lines < 1 || lines > 3 || len(logs) > 1500 {
		t.Fatalf("10 requests for a 60 KB source name logged %d lines, %d bytes:\n%s", lines, len(logs), logs)
	}
	if !strings.Contains(logs, `"source_bytes":61449`) || strings.Contains(logs, strings.Repeat("n", 100)) {
		t.Fatalf("the source name is not cut with its length:\n%s", logs)
	}

	before := len(logs)
	body, _ := jsonEvent("CANARYid"+strings.Repeat("i", 300<<10), "t")
	if code, answer, _ := do(t, stripeRequest(t, b.url, body, time.Now())); code != 400 || !strings.Contains(answer, "event_id_too_long") {
		t.Fatalf("300 KB id: %d %s", code, answer)
	}
	if grown := len(b.logs.String()) - before; grown > 300 {
		t.Fatalf("a 300 KB id grew the log by %d bytes:\n%s", grown, b.logs.String()[before:])
	}
}

// Store errors name the event's id, cut to a few dozen bytes with its length:
// an id the database refuses (a NUL in it) does not make a kilobyte error.
func TestStoreErrorsCarryNoLargeValue(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, err := database.Open(ctx, pgtest.NewDatabase(t), database.Options{Role: schema.IngressRole})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	id := "evt_nul\x00" + strings.Repeat("i", ingress.MaxExternalIDBytes-8)
	_, err = ingress.NewPGStore(pool, nil).Insert(ctx, event(id))
	if !errors.Is(err, ingress.ErrUnstorable) {
		t.Fatalf("insert of an id with a NUL: %v", err)
	}
	if msg := err.Error(); len(msg) > 300 || !strings.Contains(msg, "(1024 bytes)") {
		t.Fatalf("error of %d bytes, want the id cut with its length: %s", len(msg), msg)
	}
}
