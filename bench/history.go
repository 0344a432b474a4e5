package main

import (
	"context"
	"flag"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// historyWeeks is how many past weekly periods the run's database gets
// partitions for before any measurement, as an installation that has kept a
// year of events has 52 (retention creates the periods ahead; the periods
// behind stay until max_age drops them).
var historyWeeks = flag.Int("history-weeks", 0, "give the run's database this many past weekly partitions of events, jobs and job_attempts (empty), as an installation keeping that much history has; every partition adds to what a statement over jobs locks and plans")

// addHistory creates weeks empty weekly partitions before the oldest period
// partition, with the storage settings and triggers create_partitions gives
// new ones.
func addHistory(ctx context.Context, conn *pgx.Conn, weeks int) error {
	if weeks <= 0 {
		return nil
	}
	_, err := conn.Exec(ctx, `
DO $$
DECLARE
    oldest timestamptz;
    s      timestamptz;
    t      text;
BEGIN
    SELECT min(period_start) INTO oldest FROM webhook_ingress.partitions();
    FOR k IN 1..`+fmt.Sprint(weeks)+` LOOP
        s := oldest - k * interval '1 week';
        EXECUTE format('CREATE TABLE webhook_ingress.%I PARTITION OF webhook_ingress.events FOR VALUES FROM (%L) TO (%L)',
                       webhook_ingress.partition_name('events', s), s, s + interval '1 week');
        EXECUTE format('CREATE TABLE webhook_ingress.%I PARTITION OF webhook_ingress.jobs FOR VALUES FROM (%L) TO (%L) WITH (%s)',
                       webhook_ingress.partition_name('jobs', s), s, s + interval '1 week', webhook_ingress.jobs_partition_options());
        EXECUTE format('CREATE TABLE webhook_ingress.%I PARTITION OF webhook_ingress.job_attempts FOR VALUES FROM (%L) TO (%L)',
                       webhook_ingress.partition_name('job_attempts', s), s, s + interval '1 week');
        FOREACH t IN ARRAY ARRAY['events_append_only_row', 'events_dedupe'] LOOP
            EXECUTE format('ALTER TABLE webhook_ingress.%I ENABLE ALWAYS TRIGGER %I',
                           webhook_ingress.partition_name('events', s), t);
        END LOOP;
    END LOOP;
END
$$`)
	if err != nil {
		return fmt.Errorf("create %d past weekly partitions: %w", weeks, err)
	}
	var n int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_inherits WHERE inhparent = 'webhook_ingress.jobs'::regclass`).Scan(&n); err != nil {
		return err
	}
	fmt.Printf("history: %d past weekly partitions added; jobs has %d partitions\n", weeks, n)
	return nil
}
