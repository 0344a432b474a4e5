package dashboard_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/audit"
	"github.com/inlet-dev/inlet/internal/database"
	"github.com/inlet-dev/inlet/schema"
)

// Two events altered after sealing, found by a recorded verification: their
// pages say altered and unverified, never verified; an untouched event says
// intact; the audit page and the overview show the tampering with the
// verification's counts.
func TestDashboardShowsAlteredEvents(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, options{})
	var ids []int64
	for i := range 4 {
		ids = append(ids, b.insert(t, "stripe", fmt.Sprintf("evt_sealed_%d", i), []byte(`{}`), b.now.Add(-time.Hour)))
	}
	url := b.super.Config().ConnString()
	sealerDB, err := database.Open(ctx, url, database.Options{Role: schema.SealerRole, MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sealerDB.Close)
	s, err := audit.NewSealer(audit.Config{DB: sealerDB, Grace: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if cps, err := s.Seal(ctx); err != nil || len(cps) != 1 {
		t.Fatalf("seal: %v, %v", cps, err)
	}
	unsealed := b.insert(t, "stripe", "evt_unsealed", []byte(`{}`), b.now)

	c := b.client(t)
	c.login()
	state := func(id int64) string {
		t.Helper()
		r := c.get(fmt.Sprintf("/dashboard/events/%d", id))
		if r.code != http.StatusOK {
			t.Fatalf("event %d: %d\n%s", id, r.code, r.body)
		}
		i := strings.Index(r.body, `id="audit-state" data-state="`)
		if i < 0 {
			t.Fatalf("event %d: no audit state\n%s", id, r.body)
		}
		st := r.body[i+len(`id="audit-state" data-state="`):]
		return st[:strings.IndexByte(st, '"')]
	}
	if got := state(ids[0]); got != "unverified" {
		t.Fatalf("a sealed event before any verification: %s, want unverified", got)
	}
	if got := state(unsealed); got != "unsealed" {
		t.Fatalf("an event past the checkpoints: %s, want unsealed", got)
	}

	b.exec(t, `ALTER TABLE webhook_ingress.events DISABLE TRIGGER events_append_only_row`)
	b.exec(t, `UPDATE webhook_ingress.events SET event_type = 'forged' WHERE id = $1`, ids[1])
	b.exec(t, `UPDATE webhook_ingress.events SET raw_body = '{"forged":1}' WHERE id = $1`, ids[3])
	b.exec(t, `ALTER TABLE webhook_ingress.events ENABLE ALWAYS TRIGGER events_append_only_row`)
	rep, err := audit.Verify(ctx, b.op, audit.VerifyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := audit.Record(ctx, b.op, rep); err != nil {
		t.Fatal(err)
	}

	for _, id := range []int64{ids[1], ids[3]} {
		r := c.get(fmt.Sprintf("/dashboard/events/%d", id))
		if got := state(id); got != "altered" {
			t.Errorf("altered event %d: %s, want altered", id, got)
		}
		if !strings.Contains(r.body, `id="signature" data-state="altered"><span class="badge bad">unverified</span>`) ||
			strings.Contains(r.body, `data-state="altered">verified`) || !strings.Contains(r.body, fmt.Sprintf("event %d altered", id)) {
			t.Errorf("altered event %d: the signature is not shown as unverified, or the reason is missing\n%s", id, r.body)
		}
	}
	if got := state(ids[0]); got != "intact" {
		t.Errorf("untouched sealed event: %s, want intact", got)
	}
	if got := state(unsealed); got != "unsealed" {
		t.Errorf("unsealed event: %s, want unsealed", got)
	}

	r := c.get("/dashboard/audit")
	if r.code != http.StatusOK {
		t.Fatalf("audit page: %d\n%s", r.code, r.body)
	}
	for _, want := range []string{
		`id="audit-status" data-state="tampered"`,
		`<dd id="problems-found">2</dd>`,
		`<dd id="events-checked">5 <span class="muted">(1 not yet sealed)</span></dd>`,
		`<dd id="checkpoints-checked">1, through event id 4</dd>`,
		fmt.Sprintf(`<tr class="problem" data-kind="altered_event" data-event-id="%d">`, ids[1]),
		fmt.Sprintf(`<tr class="problem" data-kind="altered_event" data-event-id="%d">`, ids[3]),
	} {
		if !strings.Contains(r.body, want) {
			t.Errorf("audit page lacks %s", want)
		}
	}
	if r := c.get("/dashboard/"); r.code != http.StatusOK || !strings.Contains(r.body, `id="audit-tampered"`) {
		t.Errorf("overview: %d, no tampering banner", r.code)
	}
}
