package dashboard

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/schema/queries"
)

// reconcileRuns is the overview's Reconciliation table.
type reconcileRuns struct {
	// Current is the newest inlet reconcile run of each listing scope the
	// source's runs still list, with its outcome.
	Current []queries.LatestReconcileRunsRow
	// Superseded are the scopes whose newest run started more than 24 hours
	// before their source's newest (an entry removed or relabelled, the
	// whole-source runs of before migration 071): listed apart, their last
	// outcome not shown as the source's current state.
	Superseded []queries.LatestReconcileRunsRow
}

// loadReconcileRuns is the newest inlet reconcile run of each listing scope
// of each source (a reconcile.sources entry; the whole source when it has
// none), a dry run only where the scope has no other (none when reconcile
// never ran): one entry's failure shows even when another entry of the same
// source succeeds after it, and a scope no run has listed for a day before
// the source's newest run is set apart (LatestReconcileRuns).
func loadReconcileRuns(ctx context.Context, tx pgx.Tx) (reconcileRuns, error) {
	runs, err := queries.New(tx).LatestReconcileRuns(ctx)
	if err != nil {
		return reconcileRuns{}, fmt.Errorf("read the last reconcile runs: %w", err)
	}
	var r reconcileRuns
	for _, run := range runs {
		if run.Superseded {
			r.Superseded = append(r.Superseded, run)
		} else {
			r.Current = append(r.Current, run)
		}
	}
	return r, nil
}
