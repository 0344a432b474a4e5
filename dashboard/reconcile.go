package dashboard

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/schema/queries"
)

// loadReconcileRuns is each source's newest inlet reconcile run (none when
// reconcile never ran).
func loadReconcileRuns(ctx context.Context, tx pgx.Tx) ([]queries.ReconcileRun, error) {
	runs, err := queries.New(tx).LatestReconcileRuns(ctx)
	if err != nil {
		return nil, fmt.Errorf("read the last reconcile runs: %w", err)
	}
	return runs, nil
}
