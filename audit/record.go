package audit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/schema/queries"
)

// Verification is a recorded outcome of Verify
// (webhook_ingress.audit_verifications): what the dashboard and the
// inlet_audit_* metrics show.
type Verification struct {
	ID         int64     `json:"id"`
	VerifiedAt time.Time `json:"verified_at"`
	// VerifiedBy is the database role it ran as.
	VerifiedBy string `json:"verified_by"`
	// Report is the report recorded; Root is not kept, and Problems holds
	// the problems listed (none in Recent's rows).
	Report Report `json:"report"`
}

// Record stores rep as the newest verification. db must be able to insert
// into audit_verifications (webhook_operator; webhook_auditor only reads).
func Record(ctx context.Context, db queries.DBTX, rep Report) error {
	problems, err := json.Marshal(rep.Problems)
	if err != nil {
		return fmt.Errorf("record verification: encode problems: %w", err)
	}
	if rep.Problems == nil {
		problems = []byte("[]")
	}
	err = queries.New(db).AuditRecordVerification(ctx, queries.AuditRecordVerificationParams{
		Ok: rep.OK, Checkpoints: rep.Checkpoints, SealedThrough: rep.SealedThrough, Events: rep.Events,
		Unsealed: rep.Unsealed, Pruned: rep.Pruned, ProblemsFound: rep.ProblemsFound,
		ProblemsTruncated: rep.ProblemsTruncated, ChainBroken: rep.ChainBroken, Problems: problems, Head: rep.Head,
	})
	if err != nil {
		return fmt.Errorf("record verification in audit_verifications: %w", err)
	}
	return nil
}

// LastVerification returns the newest recorded verification; false when
// none was recorded.
func LastVerification(ctx context.Context, db queries.DBTX) (Verification, bool, error) {
	r, err := queries.New(db).AuditLastVerification(ctx)
	if errors.Is(err, pgx.ErrNoRows) {
		return Verification{}, false, nil
	}
	if err != nil {
		return Verification{}, false, fmt.Errorf("read the last verification: %w", err)
	}
	v := Verification{ID: r.ID, VerifiedAt: r.VerifiedAt, VerifiedBy: r.VerifiedBy, Report: Report{
		OK: r.Ok, Checkpoints: r.Checkpoints, SealedThrough: r.SealedThrough, Events: r.Events, Unsealed: r.Unsealed,
		Pruned: r.Pruned, ProblemsFound: r.ProblemsFound, ProblemsTruncated: r.ProblemsTruncated,
		ChainBroken: r.ChainBroken, Head: r.Head,
	}}
	if err := json.Unmarshal(r.Problems, &v.Report.Problems); err != nil {
		return Verification{}, false, fmt.Errorf("verification %d: decode problems: %w", r.ID, err)
	}
	if len(v.Report.Problems) > 0 {
		v.Report.Problem = &v.Report.Problems[0]
	}
	return v, true, nil
}

// Recent returns the newest n recorded verifications, newest first, without
// their problem lists.
func Recent(ctx context.Context, db queries.DBTX, n int) ([]Verification, error) {
	rows, err := queries.New(db).AuditRecentVerifications(ctx, int64(n))
	if err != nil {
		return nil, fmt.Errorf("read recent verifications: %w", err)
	}
	out := make([]Verification, len(rows))
	for i, r := range rows {
		out[i] = Verification{ID: r.ID, VerifiedAt: r.VerifiedAt, VerifiedBy: r.VerifiedBy, Report: Report{
			OK: r.Ok, Checkpoints: r.Checkpoints, SealedThrough: r.SealedThrough, Events: r.Events,
			ProblemsFound: r.ProblemsFound, ChainBroken: r.ChainBroken,
		}}
	}
	return out, nil
}

// EventState is what a recorded verification says of one event.
type EventState string

// The states of an event.
const (
	// StateIntact: sealed, and the verification checked it and found it intact.
	StateIntact EventState = "intact"
	// StateAltered: the verification lists a problem of the event.
	StateAltered EventState = "altered"
	// StateUnverified: sealed, but no verification vouches for it: none was
	// recorded, or it came later, or the chain broke before it, or it may be
	// among the problems the verification cut from its list.
	StateUnverified EventState = "unverified"
	// StateUnsealed: no checkpoint covers it yet.
	StateUnsealed EventState = "unsealed"
)

// StateOf says what v (ok false: none recorded) says of event id, which the
// checkpoints cover through sealedThrough, and the problem it lists for the
// event, if any.
func StateOf(v Verification, ok bool, id, sealedThrough int64) (EventState, *Problem) {
	if ok {
		for i, p := range v.Report.Problems {
			if p.EventID == id && p.Kind != BrokenChain {
				return StateAltered, &v.Report.Problems[i]
			}
		}
	}
	switch {
	case id > sealedThrough:
		return StateUnsealed, nil
	// A broken chain vouches for nothing it covers: the checkpoints that
	// seal an event may be a rewrite (review helper-96).
	case !ok || id > v.Report.SealedThrough || v.Report.ProblemsTruncated || v.Report.ChainBroken:
		return StateUnverified, nil
	}
	return StateIntact, nil
}
