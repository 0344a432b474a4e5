-- 079_reconcile_runs_newest_per_scope: the dashboard's Reconciliation table
-- reads each listing scope's newest run through an index, not the whole run
-- history (review helper-327).
--
-- The overview's Reconciliation table (schema/queries/reconcile.sql
-- LatestReconcileRuns) shows the newest run of each (source, scope), NULL
-- and '' as one, that is not a dry run (a scope with dry runs only: its
-- newest). It read and sorted every reconcile_runs row on every page load,
-- and nothing deletes reconcile_runs: with reconcile.interval 1m, 1,440 rows
-- a day per entry, 100,000 within three weeks for three entries, and the
-- landing page cost a full scan and an on-disk sort (~206 ms at 100,000
-- runs) that grew without bound. idx_reconcile_runs_scope_newest orders the
-- runs as the table chooses them (source, scope, dry_run, newest first), so
-- the query steps from one scope to the next (a recursive CTE, one probe of
-- the index each: a loose index scan) and reads a row or two per scope
-- shown, however long the history (60 rows, 0.3-0.8 ms at 100,000
-- runs).
--
-- Safe on a large live log: events is untouched; reconcile_runs is a small
-- table (a row per run), and the index is built in inlet migrate's
-- transaction, as 010, 020 and 026 built theirs on their small tables (a
-- CONCURRENTLY build is left to schema.BuildIndexes for the partitions of
-- events and jobs only). The build holds reconcile_runs' SHARE lock while it
-- runs, under inlet migrate's 10 s lock_timeout: a reconcile run starting
-- or ending meanwhile waits to record itself (the build took 0.2-0.4 s
-- at 100,000 runs); nothing else writes the table, and its readers (the
-- dashboard, the schedule's coverage) go on. Services of the previous
-- version run beside it unchanged (their dashboard reads the whole table as
-- before). It runs twice safely (IF NOT EXISTS; the comment again changes
-- nothing).
CREATE INDEX IF NOT EXISTS idx_reconcile_runs_scope_newest
    ON webhook_ingress.reconcile_runs (source, (coalesce(scope, '')), dry_run, id DESC);
COMMENT ON INDEX webhook_ingress.idx_reconcile_runs_scope_newest IS
    'Each (source, scope)''s runs, NULL and '''' as one, real runs before dry runs, newest first: the dashboard''s newest run per listing scope (LatestReconcileRuns), one probe per scope (079).';
