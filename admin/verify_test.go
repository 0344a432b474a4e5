package admin_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/admin"
	"github.com/inlet-dev/inlet/ingress/verify"
)

func TestEventsReverifyDetectsATamperedRow(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	since := time.Now().Add(-time.Hour)
	stripe := b.ingest(t, "stripe", "evt_ok")
	github := b.ingest(t, "github", "delivery-1")
	gitlab := b.ingest(t, "gitlab", "6a2c1f53-0000-4000-8000-000000000001") // token stored as its sha256 only
	twilio := b.ingest(t, "twilio", "idem-1")                               // URL rebuilt from public_url + the stored query
	tampered := b.ingest(t, "stripe", "evt_tampered")
	unknown := b.insert(t, event{source: "retired", id: "r1", body: []byte("{}")})

	// Everything verifies before the row is changed, except the source that
	// is no longer configured.
	rep, err := admin.Reverify(ctx, b.op, b.sources, admin.VerifyRequest{Since: since})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Checked != 6 || rep.Verified != 5 || rep.Failed != 1 || rep.Failures[0].EventID != unknown ||
		rep.Failures[0].Reason != "source_not_configured" {
		t.Fatalf("before tampering: %+v", rep)
	}

	// The owner alters a stored body, with the append-only trigger switched
	// off for it, as an attacker with the owner's password could.
	b.exec(t, `ALTER TABLE webhook_ingress.events DISABLE TRIGGER events_append_only_row`)
	b.exec(t, `UPDATE webhook_ingress.events SET raw_body = convert_to(replace(convert_from(raw_body, 'UTF8'), '4200', '9900'), 'UTF8') WHERE id = $1`, tampered)
	b.exec(t, `ALTER TABLE webhook_ingress.events ENABLE ALWAYS TRIGGER events_append_only_row`)
	if n := b.count(t, `SELECT count(*) FROM webhook_ingress.events WHERE id = $1 AND convert_from(raw_body, 'UTF8') LIKE '%9900%'`, tampered); n != 1 {
		t.Fatal("the tampering did not take")
	}

	rep, err = admin.Reverify(ctx, b.op, b.sources, admin.VerifyRequest{Since: since})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Checked != 6 || rep.Verified != 4 || rep.Failed != 2 {
		t.Fatalf("after tampering: %+v", rep)
	}
	f := rep.Failures[0]
	if f.EventID != tampered || f.Provider != "stripe" || f.ExternalEventID != "evt_tampered" || f.Reason != "signature_mismatch" {
		t.Fatalf("failure = %+v", f)
	}

	// One id at a time.
	for id, failed := range map[int64]int{stripe: 0, github: 0, gitlab: 0, twilio: 0, tampered: 1} {
		rep, err := admin.Reverify(ctx, b.op, b.sources, admin.VerifyRequest{ID: id})
		if err != nil || rep.Checked != 1 || rep.Failed != failed {
			t.Errorf("event %d: %+v, %v; want %d failed", id, rep, err, failed)
		}
	}
	// One source; a range that excludes everything.
	rep, err = admin.Reverify(ctx, b.op, b.sources, admin.VerifyRequest{Since: since, Provider: "github"})
	if err != nil || rep.Checked != 1 || rep.Failed != 0 {
		t.Fatalf("github only: %+v, %v", rep, err)
	}
	rep, err = admin.Reverify(ctx, b.op, b.sources, admin.VerifyRequest{Since: since, Until: since.Add(time.Minute)})
	if err != nil || rep.Checked != 0 {
		t.Fatalf("empty range: %+v, %v", rep, err)
	}

	// A rotated-out secret, and a source of another type now.
	rotated := admin.Sources{
		"github": {Type: "github", Secrets: []string{"a-new-secret"}},
		"stripe": {Type: "standard-webhooks", Secrets: []string{"whsec_aW5sZXQtZGV2LXN0YW5kYXJkLXdlYmhvb2tzLWtleSE="}},
	}
	rep, err = admin.Reverify(ctx, b.op, rotated, admin.VerifyRequest{ID: github})
	if err != nil || rep.Failed != 1 || rep.Failures[0].Reason != "signature_mismatch" {
		t.Fatalf("rotated secret: %+v, %v", rep, err)
	}
	rep, err = admin.Reverify(ctx, b.op, rotated, admin.VerifyRequest{ID: stripe})
	if err != nil || rep.Failed != 1 || rep.Failures[0].Reason != "scheme_changed" {
		t.Fatalf("changed type: %+v, %v", rep, err)
	}

	// Bad requests.
	for _, req := range []admin.VerifyRequest{{}, {ID: stripe, Since: since}, {ID: -1}, {Since: since, Until: since}} {
		_, err := admin.Reverify(ctx, b.op, b.sources, req)
		wantErr(t, err, admin.ErrInvalid)
	}
	_, err = admin.Reverify(ctx, b.op, b.sources, admin.VerifyRequest{ID: unknown + 100})
	wantErr(t, err, admin.ErrNotFound)
}

// A twilio source without public_url: the host Twilio called is not stored,
// so only events that arrived at http://localhost re-verify, and the failure
// says why.
func TestEventsReverifyTwilioWithoutPublicURL(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	b.sources = admin.Sources{"twilio": {Type: "twilio", Secrets: []string{"admin-test-twilio-token"}}}
	sign := func(id, host string) int64 {
		cfg := b.sources["twilio"]
		h, body, err := verify.SignTest(cfg, id, nil, "http://"+host+"/webhooks/twilio", time.Now())
		if err != nil {
			t.Fatal(err)
		}
		return b.insert(t, event{source: "twilio", id: id, eventType: "delivered", body: body, headers: h})
	}
	local := sign("idem-local", "localhost")
	remote := sign("idem-remote", "hooks.example.com")
	rep, err := admin.Reverify(ctx, b.op, b.sources, admin.VerifyRequest{ID: local})
	if err != nil || rep.Failed != 0 {
		t.Fatalf("localhost: %+v, %v", rep, err)
	}
	rep, err = admin.Reverify(ctx, b.op, b.sources, admin.VerifyRequest{ID: remote})
	if err != nil || rep.Failed != 1 || rep.Failures[0].Reason != "signature_mismatch" {
		t.Fatalf("remote host: %+v, %v", rep, err)
	}
	if d := rep.Failures[0].Detail; !strings.Contains(d, "set public_url") {
		t.Fatalf("detail %q does not say to set public_url", d)
	}
}

// An event stored without a signature (backfilled, reconciled) has none to
// re-check: a time range leaves it out, and asked for by id it is
// ErrConflict (409) saying so, never ErrNotFound (404), which is kept for an
// id that is not stored (review helper-142).
func TestEventsReverifyUnsignedEvent(t *testing.T) {
	t.Parallel()
	b := setupAPI(t)
	ctx := context.Background()
	since := time.Now().Add(-time.Hour)
	signed := b.ingest(t, "stripe", "evt_signed")
	var unsigned int64
	if err := b.super.QueryRow(ctx, `INSERT INTO webhook_ingress.events
		(provider, scheme, external_event_id, event_type, raw_body, signature_verified)
		VALUES ('stripe', 'stripe', 'evt_backfilled', 'invoice.paid', '{}', false) RETURNING id`).Scan(&unsigned); err != nil {
		t.Fatal(err)
	}

	rep, err := admin.Reverify(ctx, b.op, b.sources, admin.VerifyRequest{Since: since})
	if err != nil || rep.Checked != 1 || rep.Verified != 1 {
		t.Fatalf("range: %+v, %v; want the signed event alone checked", rep, err)
	}
	rep, err = admin.Reverify(ctx, b.op, b.sources, admin.VerifyRequest{ID: signed})
	if err != nil || rep.Checked != 1 || rep.Verified != 1 {
		t.Fatalf("signed event %d: %+v, %v", signed, rep, err)
	}
	_, err = admin.Reverify(ctx, b.op, b.sources, admin.VerifyRequest{ID: unsigned})
	wantErr(t, err, admin.ErrConflict)
	want := "re-verify event " + itoa(unsigned) + ": stored without a signature (backfilled or reconciled): nothing to re-verify"
	if errors.Is(err, admin.ErrNotFound) || err.Error() != want {
		t.Fatalf("unsigned event %d: %v, want %q", unsigned, err, want)
	}
	_, err = admin.Reverify(ctx, b.op, b.sources, admin.VerifyRequest{ID: unsigned + 100})
	wantErr(t, err, admin.ErrNotFound)

	for _, c := range []struct {
		id   int64
		code int
		want string
	}{
		{unsigned, http.StatusConflict, want},
		{unsigned + 100, http.StatusNotFound, "re-verify event " + itoa(unsigned+100) + ": no such event"},
	} {
		code, _, body := b.call(t, "POST", "/api/events/verify", `{"id":`+itoa(c.id)+`}`)
		var got struct{ Error string }
		if err := json.Unmarshal(body, &got); err != nil || code != c.code || got.Error != c.want {
			t.Errorf("POST /api/events/verify {\"id\":%d}: %d %s, want %d %q", c.id, code, body, c.code, c.want)
		}
	}
}
