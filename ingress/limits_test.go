package ingress_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/ingress"
	"github.com/inlet-dev/inlet/ingress/sources"
	"github.com/inlet-dev/inlet/ingress/verify"
	"github.com/inlet-dev/inlet/internal/database"
	"github.com/inlet-dev/inlet/internal/pgtest"
	"github.com/inlet-dev/inlet/schema"
)

// A correctly signed request whose key fields the database could never index
// (a 300 KB Stripe id, a 500 KB type, a 3 KB GitHub delivery id or event
// header), or with too many or too large headers, is refused with a 4xx and
// its reason, stored nowhere, and neither the answer nor the log carries the
// value. At the limits themselves the event is stored.
func TestKeyFieldsOverTheirLimitsAre4xx(t *testing.T) {
	t.Parallel()
	b := setupOn(t, pgtest.NewDatabase(t), 1<<20)
	const canary = "CANARY9q"
	big := func(n int) string { return canary + strings.Repeat("x", n-len(canary)) }
	stripe := func(id, typ string) *http.Request {
		body, _ := jsonEvent(id, typ)
		return stripeRequest(t, b.url, body, time.Now())
	}
	github := func(delivery, event string) *http.Request {
		body := []byte(`{"zen":"Keep it logically awesome."}`)
		req, _ := http.NewRequest(http.MethodPost, b.url+"/webhooks/github", bytes.NewReader(body))
		for k, v := range verify.SignGitHub(githubSecret, delivery, event, body) {
			req.Header[k] = v
		}
		return req
	}
	manyHeaders := stripe("evt_many_headers", "t")
	for i := range ingress.MaxHeaderCount {
		manyHeaders.Header.Set(fmt.Sprintf("X-Pad-%d", i), "v")
	}
	largeHeaders := stripe("evt_large_headers", "t")
	for i := range 5 {
		largeHeaders.Header.Set(fmt.Sprintf("X-Pad-%d", i), big(8<<10))
	}

	cases := []struct {
		name   string
		req    *http.Request
		code   int
		reason string
	}{
		{"stripe id of 300 KB", stripe(big(300<<10), "t"), 400, "event_id_too_long"},
		{"stripe type of 500 KB", stripe("evt_big_type", big(500<<10)), 400, "event_type_too_long"},
		{"stripe id one byte over", stripe(big(ingress.MaxExternalIDBytes+1), "t"), 400, "event_id_too_long"},
		{"stripe type one byte over", stripe("evt_type_over", big(ingress.MaxEventTypeBytes+1)), 400, "event_type_too_long"},
		{"github delivery of 3 KB", github(big(3<<10), "push"), 400, "event_id_too_long"},
		{"github event of 3 KB", github("d-1", big(3<<10)), 400, "event_type_too_long"},
		{"101 header lines", manyHeaders, 431, "too_many_headers"},
		{"40 KB of headers", largeHeaders, 431, "headers_too_large"},
		{"stripe id and type at their limits", stripe("evt_"+strings.Repeat("i", ingress.MaxExternalIDBytes-4), strings.Repeat("t", ingress.MaxEventTypeBytes)), 200, "stored"},
		{"github id and type at their limits", github(strings.Repeat("d", ingress.MaxExternalIDBytes), strings.Repeat("e", ingress.MaxEventTypeBytes)), 200, "stored"},
	}
	for _, c := range cases {
		code, answer, _ := do(t, c.req)
		if code != c.code || !strings.Contains(answer, c.reason) {
			t.Errorf("%s: %d %q, want %d with %q", c.name, code, answer, c.code, c.reason)
		}
		if strings.Contains(answer, canary) {
			t.Errorf("%s: the answer echoes the request", c.name)
		}
	}
	if n := count(t, b.admin, `SELECT count(*) FROM webhook_ingress.events`); n != 2 {
		t.Fatalf("%d events stored, want only the 2 at the limits", n)
	}
	if logs := b.logs.String(); strings.Contains(logs, canary) {
		t.Fatalf("the log carries a value over its limit:\n%.2000s", logs)
	}
}

func jsonEvent(id, typ string) ([]byte, error) {
	return fmt.Appendf(nil, `{"id":%q,"type":%q}`, id, typ), nil
}

// A source name longer than the schema's key allows is a configuration
// error at start, naming the field.
func TestSourceNameOverItsLimit(t *testing.T) {
	t.Parallel()
	_, err := ingress.New(ingress.Config{
		Store:   ingress.NewPGStore(nil, nil),
		Sources: []sources.Source{{Name: strings.Repeat("s", ingress.MaxSourceNameBytes+1), Config: verify.Config{Type: "github", Secrets: []string{"x"}}}},
	})
	if err == nil || !strings.Contains(err.Error(), "sources[0].name") {
		t.Fatalf("New with a 64-byte source name: %v", err)
	}
}

// Both stores refuse an event over a limit before it reaches the database,
// and an event whose data PostgreSQL itself refuses (a NUL in its id, SQLSTATE
// 22021) fails with ErrUnstorable too; for the group store only that event
// fails, not the others of its batch.
func TestStoresReportUnstorableEvents(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.NewDatabase(t)
	pool, err := database.Open(ctx, url, database.Options{Role: schema.IngressRole})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	group := ingress.NewGroupStore(pool, nil, ingress.GroupConfig{MaxWait: 20 * time.Millisecond})
	t.Cleanup(group.Close)
	stores := map[string]ingress.Store{"PGStore": ingress.NewPGStore(pool, nil), "GroupStore": group}
	for name, store := range stores {
		for _, bad := range []*ingress.Event{
			event(name + strings.Repeat("i", ingress.MaxExternalIDBytes)),
			{Provider: "stripe", Scheme: "stripe", ExternalID: name + "-type", EventType: strings.Repeat("t", ingress.MaxEventTypeBytes+1)},
			event(name + "-nul\x00"),
		} {
			// The NUL event shares its batch with a good one.
			good := make(chan error, 1)
			go func() { _, err := store.Insert(ctx, event(name+"-good-"+fmt.Sprint(len(bad.ExternalID)))); good <- err }()
			_, err := store.Insert(ctx, bad)
			if !errors.Is(err, ingress.ErrUnstorable) {
				t.Errorf("%s: insert of an unstorable event (id %d bytes): %v, want ErrUnstorable", name, len(bad.ExternalID), err)
			} else {
				t.Logf("%s: %.200v", name, err)
			}
			if err := <-good; err != nil {
				t.Errorf("%s: the good event beside it: %v", name, err)
			}
		}
	}
}
