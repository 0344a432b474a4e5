package streamer

import (
	"context"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/inlet-dev/inlet/internal/pgtest"
)

// Replicas that all found the publication missing all create it: the losers
// (a unique violation on the catalog's index, as they started before the
// winner committed) take the winner's. Every replica is held after its check
// until all have checked, so the race happens on every run.
func TestEnsurePublicationWhenAllFindItMissing(t *testing.T) {
	ctx := context.Background()
	url := pgtest.NewDatabase(t)
	const replicas = 4
	var checked sync.WaitGroup
	checked.Add(replicas)
	publicationMissing = func() { checked.Done(); checked.Wait() }
	t.Cleanup(func() { publicationMissing = func() {} })
	errs := make(chan error, replicas)
	for range replicas {
		conn, err := pgconn.Connect(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close(context.Background()) })
		go func() { errs <- ensurePublication(ctx, conn) }()
	}
	for range replicas {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	exists, err := checkPublication(ctx, mustConnect(t, url))
	if err != nil || !exists {
		t.Fatalf("publication after the race: exists %v, %v", exists, err)
	}
}

func mustConnect(t *testing.T, url string) *pgconn.PgConn {
	t.Helper()
	conn, err := pgconn.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}
