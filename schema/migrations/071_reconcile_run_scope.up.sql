-- 071_reconcile_run_scope: each reconcile run records what it listed
-- (scope), and the scheduled reconcile's coverage is computed per listing
-- scope, not per source name (review helper-241).
--
-- A run compares only what its lister lists: a Stripe entry's types:, a
-- GitHub entry's repository or organization and hook. Several
-- reconcile.sources entries may feed one source (more than 20 Stripe types,
-- several repositories' hooks into one github source), and the coverage the
-- schedule reaches back to (ReconcileCoveredUntil) merged the runs of the
-- source name: after an outage the first entry's catch-up closed the gap for
-- the source, and the second entry compared only its default window, so its
-- events in the rest of the gap were never compared. scope is what narrowed
-- the listing: a Stripe run's types, sorted (types=charge.*,invoice.*), a
-- GitHub run's repo=owner/name hook=123 or org=acme hook=123. '' or NULL is
-- the whole source: a Stripe run without a type filter, or a run recorded
-- before this migration or by a previous version's streamer or command
-- (which cover every scope of their source, as every run did before). A run
-- covers a scope when its scope is that one or the whole source.
--
-- Safe on a live log: reconcile_runs is a small table (a few rows a day per
-- source), events is untouched; the column is nullable without a default
-- (nothing rewritten) and the statement holds its lock for an instant. It
-- runs twice safely (IF NOT EXISTS; the comment and the grant again change
-- nothing).
ALTER TABLE webhook_ingress.reconcile_runs ADD COLUMN IF NOT EXISTS scope text;
COMMENT ON COLUMN webhook_ingress.reconcile_runs.scope IS
    'What the run listed, when narrower than the whole source (071): a Stripe run''s types, sorted (types=a,b), a GitHub run''s repo=owner/name hook=id or org=name hook=id. '''' or NULL: the whole source (a Stripe run without types; a run recorded before 071). The scheduled reconcile''s coverage of an entry merges the runs of its scope and of the whole source.';

-- The ingress role, which records a run when it starts, writes its scope.
GRANT INSERT (scope) ON webhook_ingress.reconcile_runs TO webhook_ingress_writer;
