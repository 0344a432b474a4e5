package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/internal/pgtest"
)

// inlet audit seal and verify end to end: intact exits 0 and prints the head;
// a body rewritten by the owner (trigger disabled) exits 1 naming the event;
// --json carries the same; a kept head shows a removed newest checkpoint.
func TestAuditSealVerifyEndToEnd(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.NewDatabase(t)
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	for i := range 5 {
		if _, err := conn.Exec(ctx, `INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, raw_body, signature_verified, received_at)
			VALUES ('stripe', 'stripe', $1, '\x7b7d', true, now() - interval '1 minute')`, fmt.Sprintf("evt_audit_%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	env := cleanEnv("DATABASE_URL=" + url)

	out, errOut, code := runInlet(t, env, "audit", "seal", "--max-leaves", "3")
	if code != 0 || !strings.Contains(out, "sealed 2 checkpoints: event ids 1..5") {
		t.Fatalf("audit seal: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	out, errOut, code = runInlet(t, env, "audit", "seal")
	if code != 0 || !strings.Contains(out, "nothing to seal") {
		t.Fatalf("second audit seal: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	out, errOut, code = runInlet(t, env, "audit", "verify")
	if code != 0 || !strings.HasPrefix(out, "intact: 5 events, 2 checkpoints") {
		t.Fatalf("audit verify: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	head := strings.TrimSpace(out[strings.LastIndex(out, " ")+1:])
	if out, errOut, code := runInlet(t, env, "audit", "verify", "--head", head); code != 0 {
		t.Fatalf("audit verify --head %s: exit %d, %q %q", head, code, out, errOut)
	}

	// Two events altered: both are reported, with the counts of a full pass,
	// in the table, in --json and in audit_verifications.
	if _, err := conn.Exec(ctx, `ALTER TABLE webhook_ingress.events DISABLE TRIGGER events_append_only_row;
		UPDATE webhook_ingress.events SET raw_body = '\x7b2278223a317d' WHERE id = 4;
		UPDATE webhook_ingress.events SET event_type = 'forged' WHERE id = 2;
		ALTER TABLE webhook_ingress.events ENABLE ALWAYS TRIGGER events_append_only_row`); err != nil {
		t.Fatal(err)
	}
	out, errOut, code = runInlet(t, env, "audit", "verify")
	if code != 1 || strings.Count(strings.TrimSpace(errOut), "\n") != 0 || !strings.Contains(errOut, "2 problems found; the first: event 2 altered") {
		t.Fatalf("audit verify after tampering: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 4 || !strings.HasPrefix(lines[0], "KIND") ||
		strings.Join(strings.Fields(lines[1])[:3], " ") != "altered_event 1 2" ||
		strings.Join(strings.Fields(lines[2])[:3], " ") != "altered_event 2 4" ||
		!strings.HasPrefix(lines[3], "TAMPERED: 2 problems found; checked 5 events, 2 checkpoints through event id 5 sealed (0 not yet sealed)") {
		t.Fatalf("audit verify table:\n%s", out)
	}
	out, errOut, code = runInlet(t, env, "audit", "verify", "--max-problems", "1")
	if code != 1 || !strings.Contains(out, "TAMPERED: 2 problems found (1 listed: --max-problems") || strings.Count(out, "altered_event") != 1 {
		t.Fatalf("audit verify --max-problems 1: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	out, errOut, code = runInlet(t, env, "audit", "verify", "--json", "--role", "webhook_auditor")
	type problem struct {
		Kind       string `json:"kind"`
		Checkpoint int64  `json:"checkpoint"`
		EventID    int64  `json:"event_id"`
	}
	var rep struct {
		OK                bool      `json:"ok"`
		Problem           problem   `json:"problem"`
		Problems          []problem `json:"problems"`
		ProblemsFound     int64     `json:"problems_found"`
		ProblemsTruncated bool      `json:"problems_truncated"`
		Checkpoints       int64     `json:"checkpoints"`
		SealedThrough     int64     `json:"sealed_through"`
		Events            int64     `json:"events"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil || code != 1 || rep.OK || rep.Problem.Kind != "altered_event" || rep.Problem.EventID != 2 ||
		fmt.Sprint(rep.Problems) != "[{altered_event 1 2} {altered_event 2 4}]" || rep.ProblemsFound != 2 || rep.ProblemsTruncated ||
		rep.Checkpoints != 2 || rep.SealedThrough != 5 || rep.Events != 5 {
		t.Fatalf("audit verify --json: exit %d, %q (%v)", code, out, err)
	}
	// webhook_auditor reads only: its verify says it was not recorded.
	if !strings.Contains(errOut, "not recorded") {
		t.Errorf("audit verify as webhook_auditor: stderr %q, want the note that it was not recorded", errOut)
	}
	// The operator's three runs were recorded (intact, two problems, two
	// problems with one listed); the auditor's was not.
	var recorded, found int64
	var listed int
	if err := conn.QueryRow(ctx, `SELECT count(*), (array_agg(problems_found ORDER BY id DESC))[1], (array_agg(jsonb_array_length(problems) ORDER BY id DESC))[1]
		FROM webhook_ingress.audit_verifications`).Scan(&recorded, &found, &listed); err != nil || recorded != 4 || found != 2 || listed != 1 {
		t.Fatalf("audit_verifications: %d rows, newest found %d listed %d (%v); want 4 (2 verify, then 2 tampered), 2, 1", recorded, found, listed, err)
	}

	// A fresh log whose newest checkpoint is dropped: only the kept head tells.
	url2 := pgtest.NewDatabase(t)
	conn2, err := pgx.Connect(ctx, url2)
	if err != nil {
		t.Fatal(err)
	}
	defer conn2.Close(ctx)
	env2 := cleanEnv("DATABASE_URL=" + url2)
	for i := range 4 {
		if _, err := conn2.Exec(ctx, `INSERT INTO webhook_ingress.events (provider, scheme, external_event_id, raw_body, signature_verified, received_at)
			VALUES ('github', 'github', $1, '\x7b7d', true, now() - interval '1 minute')`, fmt.Sprintf("d%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	if out, errOut, code := runInlet(t, env2, "audit", "seal", "--max-leaves", "2", "--grace", "1s"); code != 0 {
		t.Fatalf("audit seal: exit %d, %q %q", code, out, errOut)
	}
	out, _, _ = runInlet(t, env2, "audit", "verify", "--json")
	var rep2 struct {
		Head string `json:"head"`
	}
	if err := json.Unmarshal([]byte(out), &rep2); err != nil || len(rep2.Head) != 64 {
		t.Fatalf("audit verify --json: %q (%v)", out, err)
	}
	if _, err := conn2.Exec(ctx, `ALTER TABLE webhook_ingress.audit_checkpoints DISABLE TRIGGER audit_checkpoints_append_only_row;
		DELETE FROM webhook_ingress.audit_checkpoints WHERE seq = 2;
		ALTER TABLE webhook_ingress.audit_checkpoints ENABLE ALWAYS TRIGGER audit_checkpoints_append_only_row`); err != nil {
		t.Fatal(err)
	}
	if _, _, code := runInlet(t, env2, "audit", "verify"); code != 0 {
		t.Fatalf("verify without --head after dropping the newest checkpoint: exit %d, want 0 (undetectable alone)", code)
	}
	_, errOut, code = runInlet(t, env2, "audit", "verify", "--head", rep2.Head)
	if code != 1 || !strings.Contains(errOut, "not in the chain") {
		t.Fatalf("verify --head: exit %d, stderr %q", code, errOut)
	}
}
