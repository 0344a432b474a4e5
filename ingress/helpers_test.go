package ingress_test

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/schema"
)

func migrateAll(ctx context.Context, url string) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = schema.Migrate(ctx, conn)
	return err
}
