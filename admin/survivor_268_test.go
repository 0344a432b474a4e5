package admin_test

import (
	"encoding/json"
	"net/http"
	"slices"
	"testing"
)

// TestSurvivor268_ReplayAnswerKeysAreTheDocumentedOnes (mutation tester
// helper-268).
// Guarantee: POST /api/replay "answers {"dry_run", "requeued", "created",
// "skipped_leased"}" (docs/operations.md), and inlet replay --json prints
// the same object: scripts read those keys.
// Mutant: admin/replay.go:76, ReplayResult: `json:"requeued"` ->
// `json:"re_queued"` (any rename of these tags).
// Why existing tests missed it: the API tests compare the answer with
// json.Marshal of what admin.Replay returns (same()), which is renamed with
// it; no test names the keys literally, and no test runs inlet replay
// --json.
func TestSurvivor268_ReplayAnswerKeysAreTheDocumentedOnes(t *testing.T) {
	t.Parallel()
	b := setupAPI(t)
	b.subscribe(t, "billing", "stripe", "*", 3)
	raw := b.insert(t, event{source: "stripe", id: "evt_survivor268", eventType: "invoice.paid", body: []byte(`{}`)})
	dead := b.jobID(t, raw, "billing")
	b.deadLetter(t, dead, 2, "permanent")
	for _, req := range []string{
		`{"handler":"billing","dead_letters":true,"dry_run":true}`,
		`{"job_id":` + itoa(dead) + `}`,
	} {
		code, _, got := b.call(t, "POST", "/api/replay", req)
		if code != http.StatusOK {
			t.Fatalf("POST /api/replay %s: %d %s", req, code, got)
		}
		var answer map[string]any
		if err := json.Unmarshal(got, &answer); err != nil {
			t.Fatalf("POST /api/replay %s: %v\n%s", req, err, got)
		}
		var keys []string
		for k := range answer {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		if want := []string{"created", "dry_run", "requeued", "skipped_leased"}; !slices.Equal(keys, want) {
			t.Errorf("POST /api/replay %s answered keys %v, want the documented %v\n%s", req, keys, want, got)
		}
		if n, _ := answer["requeued"].(float64); n != 1 {
			t.Errorf("POST /api/replay %s: requeued %v, want 1\n%s", req, answer["requeued"], got)
		}
	}
}
