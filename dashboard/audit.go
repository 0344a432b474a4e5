package dashboard

import (
	"context"
	"net/http"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/admin"
	"github.com/inlet-dev/inlet/audit"
	"github.com/inlet-dev/inlet/schema/queries"
)

// auditHistory is how many recorded verifications the audit page lists.
const auditHistory = 20

// auditStatus is what the dashboard shows of tamper evidence: the newest
// recorded verification (inlet audit verify) and the newest checkpoint.
type auditStatus struct {
	Last     audit.Verification
	Recorded bool // Last was recorded; false: never verified (as the operator)
	// Seq and SealedThrough are the newest checkpoint's; 0 when none.
	Seq, SealedThrough int64
}

// Tampered says the newest verification found something wrong.
func (a auditStatus) Tampered() bool { return a.Recorded && !a.Last.Report.OK }

// eventAudit is what the event page shows of one event's tamper evidence.
type eventAudit struct {
	State   audit.EventState
	Problem *audit.Problem
	Status  auditStatus
}

func loadAuditStatus(ctx context.Context, tx pgx.Tx) (auditStatus, error) {
	var a auditStatus
	var err error
	if a.Last, a.Recorded, err = audit.LastVerification(ctx, tx); err != nil {
		return a, err
	}
	r, err := queries.New(tx).AuditSealedThrough(ctx)
	if err != nil {
		return a, err
	}
	a.Seq, a.SealedThrough = r.Seq, r.LastEventID
	return a, nil
}

func loadEventAudit(ctx context.Context, db admin.DB, id int64) (eventAudit, error) {
	var e eventAudit
	err := readTx(ctx, db, func(tx pgx.Tx) error {
		var err error
		e.Status, err = loadAuditStatus(ctx, tx)
		return err
	})
	if err != nil {
		return e, err
	}
	e.State, e.Problem = audit.StateOf(e.Status.Last, e.Status.Recorded, id, e.Status.SealedThrough)
	return e, nil
}

// auditPage is the data of the audit template.
type auditPage struct {
	Status  auditStatus
	History []audit.Verification
}

func (d *Dashboard) auditPage(w http.ResponseWriter, r *http.Request, s *session) {
	ctx, cancel := d.context(r)
	defer cancel()
	var p auditPage
	err := readTx(ctx, d.cfg.DB, func(tx pgx.Tx) error {
		var err error
		if p.Status, err = loadAuditStatus(ctx, tx); err != nil {
			return err
		}
		p.History, err = audit.Recent(ctx, tx, auditHistory)
		return err
	})
	if err != nil {
		d.failErr(w, r, s, err)
		return
	}
	d.render(w, r, s, http.StatusOK, "audit", "Audit", p)
}
