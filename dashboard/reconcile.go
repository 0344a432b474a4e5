package dashboard

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/schema/queries"
)

// loadReconcileRuns is the newest inlet reconcile run of each listing scope
// of each source (a reconcile.sources entry; the whole source when it has
// none), a dry run only where the scope has no other (none when reconcile
// never ran): one entry's failure shows even when another entry of the same
// source succeeds after it.
func loadReconcileRuns(ctx context.Context, tx pgx.Tx) ([]queries.ReconcileRun, error) {
	runs, err := queries.New(tx).LatestReconcileRuns(ctx)
	if err != nil {
		return nil, fmt.Errorf("read the last reconcile runs: %w", err)
	}
	return runs, nil
}
