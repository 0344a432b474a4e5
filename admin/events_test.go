package admin_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/admin"
)

func TestListEventsFiltersAndPages(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	b.subscribe(t, "billing", "stripe", "invoice.*", 5)
	base := time.Date(2026, 3, 3, 9, 0, 0, 0, time.UTC)
	ids := map[string]int64{}
	for i, e := range []event{
		{source: "stripe", id: "evt_1", eventType: "invoice.paid"},
		{source: "stripe", id: "evt_2", eventType: "invoice.payment_failed"},
		{source: "stripe", id: "evt_3", eventType: "customer.created"},
		{source: "github", id: "gh_1", eventType: "push"},
		{source: "stripe", id: "evt_4", eventType: "invoice_x"}, // '_' is no wildcard
	} {
		e.body = []byte(`{"n":` + string(rune('0'+i)) + `}`)
		e.receivedAt = base.Add(time.Duration(i) * time.Hour)
		ids[e.id] = b.insert(t, e)
	}

	list := func(f admin.EventFilter) []string {
		t.Helper()
		page, err := admin.ListEvents(ctx, b.op, f)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, e := range page.Events {
			got = append(got, e.ExternalEventID)
		}
		return got
	}
	cases := []struct {
		name string
		f    admin.EventFilter
		want []string
	}{
		{"all, newest first", admin.EventFilter{}, []string{"evt_4", "gh_1", "evt_3", "evt_2", "evt_1"}},
		{"source", admin.EventFilter{Provider: "github"}, []string{"gh_1"}},
		{"type glob", admin.EventFilter{EventType: "invoice.*"}, []string{"evt_2", "evt_1"}},
		{"type exact", admin.EventFilter{EventType: "invoice_x"}, []string{"evt_4"}},
		{"type with an underscore is literal", admin.EventFilter{EventType: "invoice_paid"}, nil},
		{"since inclusive", admin.EventFilter{Since: base.Add(3 * time.Hour)}, []string{"evt_4", "gh_1"}},
		{"until exclusive", admin.EventFilter{Until: base.Add(2 * time.Hour)}, []string{"evt_2", "evt_1"}},
		{"range and source", admin.EventFilter{Provider: "stripe", Since: base.Add(time.Hour), Until: base.Add(4 * time.Hour)}, []string{"evt_3", "evt_2"}},
		{"external id", admin.EventFilter{ExternalEventID: "evt_3"}, []string{"evt_3"}},
		{"before", admin.EventFilter{Before: ids["evt_3"]}, []string{"evt_2", "evt_1"}},
	}
	for _, c := range cases {
		if got := list(c.f); !slices.Equal(got, c.want) {
			t.Errorf("%s: got %v, want %v", c.name, got, c.want)
		}
	}

	// Pages of two, following NextBefore, cover everything once.
	var all []string
	f := admin.EventFilter{Limit: 2}
	for pages := 0; ; pages++ {
		page, err := admin.ListEvents(ctx, b.op, f)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range page.Events {
			all = append(all, e.ExternalEventID)
		}
		if page.NextBefore == 0 {
			break
		}
		if pages > 5 {
			t.Fatal("paging does not end")
		}
		f.Before = page.NextBefore
	}
	if !slices.Equal(all, []string{"evt_4", "gh_1", "evt_3", "evt_2", "evt_1"}) {
		t.Fatalf("pages = %v", all)
	}

	// A summary has the metadata and each handler's job state, never a body.
	page, err := admin.ListEvents(ctx, b.op, admin.EventFilter{ExternalEventID: "evt_1"})
	if err != nil {
		t.Fatal(err)
	}
	e := page.Events[0]
	sum := sha256.Sum256([]byte(`{"n":0}`))
	if e.ID != ids["evt_1"] || e.Provider != "stripe" || e.EventType != "invoice.paid" || !e.ReceivedAt.Equal(base) ||
		e.BodySize != 7 || e.BodySHA256 != hex.EncodeToString(sum[:]) || !e.SignatureVerified ||
		len(e.Jobs) != 1 || e.Jobs[0] != (admin.JobState{Handler: "billing", Status: "pending"}) {
		t.Fatalf("summary = %+v", e)
	}

	for _, bad := range []admin.EventFilter{{Limit: -1}, {Limit: admin.MaxLimit + 1}, {Before: -3}, {Since: base, Until: base}} {
		if _, err := admin.ListEvents(ctx, b.op, bad); err == nil {
			t.Errorf("ListEvents(%+v): no error", bad)
		} else {
			wantErr(t, err, admin.ErrInvalid)
		}
	}
}

func TestEventsShowWithJobsAndAttempts(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	b.subscribe(t, "billing", "stripe", "*", 3)
	b.subscribe(t, "audit", "*", "*", 25)
	// Not JSON, not UTF-8, with a NUL and CR LF: stored and shown exactly.
	body := []byte("\x00\xff{\"id\":\"evt_raw\"}\r\n\x1b[31m")
	headers := http.Header{"Stripe-Signature": {"t=1,v1=abc"}, "X-Twice": {"a", "b"}}
	id := b.insert(t, event{source: "stripe", id: "evt_raw", eventType: "invoice.paid", body: body, headers: headers, requestURI: "/webhooks/stripe?x=1"})
	billing := b.jobID(t, id, "billing")
	b.deadLetter(t, billing, 3, "http_5xx")
	// audit: the first lease expired (the reaper knows no consumer), the
	// second attempt succeeded on consumer c2, kept on the job row.
	auditJob := b.jobID(t, id, "audit")
	b.exec(t, `INSERT INTO webhook_ingress.job_attempts (job_id, event_received_at, attempt, started_at, outcome, error_class)
		SELECT id, event_received_at, 1, now() - interval '1 minute', 'lease_expired', 'lease_expired' FROM webhook_ingress.jobs WHERE id = $1`, auditJob)
	success := b.complete(t, auditJob, 2, "c2")

	e, err := admin.GetEvent(ctx, b.op, id)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(e.RawBody, body) || e.BodySize != int64(len(body)) {
		t.Fatalf("raw body = %q, want %q", e.RawBody, body)
	}
	if e.RequestURI != "/webhooks/stripe?x=1" || len(e.Headers["X-Twice"]) != 2 || e.Headers["Stripe-Signature"][0] != "t=1,v1=abc" {
		t.Fatalf("request uri %q, headers %v", e.RequestURI, e.Headers)
	}
	if len(e.Jobs) != 2 || e.Jobs[0].Handler != "audit" || e.Jobs[1].Handler != "billing" {
		t.Fatalf("jobs = %+v", e.Jobs)
	}
	audit, bill := e.Jobs[0], e.Jobs[1]
	if audit.Status != "completed" || len(audit.Attempts) != 2 || audit.MaxAttempts != 25 || audit.CompletedAt == nil ||
		audit.WorkerID == nil || *audit.WorkerID != "c2" {
		t.Fatalf("audit job = %+v", audit)
	}
	if a := audit.Attempts[0]; a.Outcome != "lease_expired" || a.Attempt != 1 || a.WorkerID != nil {
		t.Fatalf("audit's expired attempt = %+v", a)
	}
	// The success: its number, consumer and completion time, from the job row.
	if a := audit.Attempts[1]; a.ID != success || a.Outcome != "completed" || a.Attempt != 2 || a.WorkerID == nil || *a.WorkerID != "c2" ||
		!a.FinishedAt.Equal(*audit.CompletedAt) || !a.StartedAt.Equal(*audit.AttemptedAt) || a.DurationMS < 1900 ||
		a.ErrorClass != nil || a.Error != nil {
		t.Fatalf("audit's successful attempt = %+v", a)
	}
	if bill.Status != "dead_letter" || bill.AttemptCount != 3 || bill.MaxAttempts != 3 || *bill.LastErrorClass != "http_5xx" ||
		*bill.LastError != "upstream said no" || len(bill.Attempts) != 3 {
		t.Fatalf("billing job = %+v", bill)
	}
	for i, a := range bill.Attempts {
		want := "failed"
		if i == 2 {
			want = "dead_letter"
		}
		if a.Attempt != i+1 || a.Outcome != want || *a.ErrorClass != "http_5xx" || *a.Error != "upstream said no" || a.DurationMS < 900 {
			t.Fatalf("attempt %d = %+v", i, a)
		}
	}

	_, err = admin.GetEvent(ctx, b.op, id+100)
	wantErr(t, err, admin.ErrNotFound)
}

func TestParseTime(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC)
	cases := map[string]time.Time{
		"":                          {},
		"24h":                       now.Add(-24 * time.Hour),
		"90m":                       now.Add(-90 * time.Minute),
		"7d":                        now.Add(-7 * 24 * time.Hour),
		"2026-03-03":                time.Date(2026, 3, 3, 0, 0, 0, 0, time.UTC),
		"2026-03-03T09:30:00Z":      time.Date(2026, 3, 3, 9, 30, 0, 0, time.UTC),
		"2026-03-03T10:30:00+01:00": time.Date(2026, 3, 3, 9, 30, 0, 0, time.UTC),
	}
	for in, want := range cases {
		got, err := admin.ParseTime(in, now)
		if err != nil || !got.Equal(want) {
			t.Errorf("ParseTime(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"yesterday", "-1h", "3/3/2026", "7days"} {
		if _, err := admin.ParseTime(bad, now); err == nil {
			t.Errorf("ParseTime(%q): no error", bad)
		} else {
			wantErr(t, err, admin.ErrInvalid)
		}
	}
}
