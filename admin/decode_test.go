package admin_test

import (
	"net/http"
	"strings"
	"testing"
)

// A replay body with data after its JSON object is malformed: it must be
// refused with 400 and change nothing (the decoder read the first value,
// ignored the rest, and re-queued the job).
func TestReplayRefusesTrailingDataAfterTheJSON(t *testing.T) {
	t.Parallel()
	b := setupAPI(t)
	b.subscribe(t, "billing", "stripe", "*", 3)
	ev := b.insert(t, event{source: "stripe", id: "evt_trailing", eventType: "x", body: []byte("{}")})
	job := b.jobID(t, ev, "billing")
	b.deadLetter(t, job, 3, "permanent")

	// What an operator meant as a dry run, mistyped as two objects.
	code, _, body := b.call(t, "POST", "/api/replay", `{"job_id":`+itoa(job)+`} {"dry_run":true}`)
	if code != http.StatusBadRequest {
		t.Errorf("POST /api/replay with trailing data: %d %s, want 400", code, body)
	}
	if got := b.job(t, job).Status; got != "dead_letter" {
		t.Errorf("a refused (malformed) replay request changed the job: status %q, want dead_letter", got)
	}
}

// A request body over the API's limit is 413, not 400.
func TestOversizedBodyIs413(t *testing.T) {
	t.Parallel()
	b := setupAPI(t)
	big := `{"handler":"` + strings.Repeat("a", 70<<10) + `","dead_letters":true}`
	for _, path := range []string{"/api/replay", "/api/events/verify"} {
		code, _, body := b.call(t, "POST", path, big)
		if code != http.StatusRequestEntityTooLarge {
			t.Errorf("POST %s with a %d-byte body: %d %s, want 413", path, len(big), code, body)
		}
	}
}
