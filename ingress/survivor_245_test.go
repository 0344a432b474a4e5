package ingress_test

import (
	"bytes"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/ingress"
	"github.com/inlet-dev/inlet/ingress/sources"
	"github.com/inlet-dev/inlet/ingress/verify"
	"github.com/inlet-dev/inlet/internal/pgtest"
)

// TestSurvivor245_RelayToleranceOfTheSourceApplies guards a source's
// relay_tolerance (ingress/sources: "how far the relay signature's timestamp
// may be from" ingress's clock): a relayed request signed longer ago than the
// source's own window is a replay and refused (401, nothing stored), even
// when it is inside the 5-minute default.
//
// Mutant (helper-245): ingress/relay.go:30, newRelayCheck's
// `if tolerance <= 0 {` changed to `if tolerance <= 0 || true {`: the
// configured tolerance is ignored and every source gets the 5-minute
// default. The relay tests use the default window only (a request 10 minutes
// old), inletyaml's test only parses relay_tolerance, and no ingress test set
// RelayTolerance, so a tighter window could widen unnoticed.
func TestSurvivor245_RelayToleranceOfTheSourceApplies(t *testing.T) {
	t.Parallel()
	const source = "ghrelay"
	relaySecrets := []string{"survivor-245-relay-secret-0123456789"}
	b := setupWith(t, pgtest.NewDatabase(t), func(c *ingress.Config) {
		c.Sources = append(c.Sources, sources.Source{
			Name:           source,
			Config:         verify.Config{Type: "github", Secrets: []string{githubSecret}},
			RelaySecrets:   relaySecrets,
			RelayTolerance: 30 * time.Second,
		})
	})
	relayed := func(id string, signedAt time.Time) *http.Request {
		t.Helper()
		body := []byte(`{"zen":"` + id + `"}`)
		req, err := http.NewRequest(http.MethodPost, b.url+"/webhooks/"+source, bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range verify.SignGitHub(githubSecret, id, "push", body) {
			req.Header[k] = v
		}
		req.Header.Set("Content-Type", "application/json")
		for k, v := range verify.SignRelay(relaySecrets, signedAt, source, req.URL.RequestURI(), verify.RelayForwardHeaders(req.Header), body) {
			req.Header[k] = v
		}
		return req
	}
	stored := func() int {
		return count(t, b.admin, `SELECT count(*) FROM webhook_ingress.events WHERE provider = $1`, source)
	}

	// Two minutes old: inside the default window, outside this source's 30s.
	code, answer, _ := do(t, relayed("d-stale", time.Now().Add(-2*time.Minute)))
	if code != http.StatusUnauthorized || !strings.Contains(answer, "relay_timestamp_outside_tolerance") {
		t.Fatalf("relayed request signed 2m ago (tolerance 30s): %d %s; want 401 relay_timestamp_outside_tolerance", code, answer)
	}
	// As far in the future.
	code, answer, _ = do(t, relayed("d-ahead", time.Now().Add(2*time.Minute)))
	if code != http.StatusUnauthorized || !strings.Contains(answer, "relay_timestamp_outside_tolerance") {
		t.Fatalf("relayed request signed 2m ahead (tolerance 30s): %d %s; want 401 relay_timestamp_outside_tolerance", code, answer)
	}
	if n := stored(); n != 0 {
		t.Fatalf("%d events stored from relayed requests outside the tolerance", n)
	}
	// A fresh one is taken: the refusals above were the window's.
	if code, answer, _ := do(t, relayed("d-fresh", time.Now())); code != http.StatusOK {
		t.Fatalf("fresh relayed request: %d %s", code, answer)
	}
	if n := stored(); n != 1 {
		t.Fatalf("%d events stored, want the fresh one", n)
	}
}
