-- name: ReconcileStoredKeys :many
-- Which of the external ids a provider listed are in the log already. Asked
-- of event_keys, whose primary key is the dedupe key (events, partitioned by
-- time, has no index on it); the ingress role may read its two key columns.
SELECT external_event_id FROM webhook_ingress.event_keys
WHERE provider = sqlc.arg(provider)::text AND external_event_id = ANY(sqlc.arg(external_ids)::text[]);

-- name: StartReconcileRun :one
-- A run's row, written when it starts: its id is the Inlet-Reconcile header
-- of every event it stores, so an event points at the run that stored it
-- even if the run is killed before FinishReconcileRun. scope is what the run
-- listed when narrower than the whole source (empty: all of it, stored as
-- NULL, as the runs recorded before migration 071 are), the scope its
-- coverage counts for (ReconcileCoveredUntil).
INSERT INTO webhook_ingress.reconcile_runs (source, api, window_since, window_until, dry_run, scope)
VALUES (sqlc.arg(source), sqlc.arg(api), sqlc.arg(window_since), sqlc.arg(window_until), sqlc.arg(dry_run), nullif(sqlc.arg(scope)::text, ''))
RETURNING id;

-- name: FinishReconcileRun :exec
-- The run's counts, once, when it ends (error NULL: it read the whole window).
UPDATE webhook_ingress.reconcile_runs
SET finished_at = now(), listed = sqlc.arg(listed), already_stored = sqlc.arg(already_stored), missing = sqlc.arg(missing),
    stored = sqlc.arg(stored), duplicates = sqlc.arg(duplicates), by_type = sqlc.arg(by_type), error = sqlc.narg(error)
WHERE id = sqlc.arg(id);

-- name: LatestReconcileRuns :many
-- The dashboard's reconciliation table: one row per listing scope of each
-- source (a reconcile.sources entry's, as recorded in scope: account=us,
-- types=a,b, repo=owner/name hook=123; NULL and '' are one, the whole
-- source), the scope's newest run that was not a dry run. Per scope, not per
-- source: an entry that fails on every round (its key revoked) is never its
-- source's newest run when another entry of the source succeeds after it,
-- and the source's newest run alone showed "ok" and hid the failure (review
-- helper-321). A dry run stores nothing and covers nothing, so it never hides
-- the scope's last real run; a scope with dry runs only shows its newest dry
-- run (marked so on the page).
--
-- superseded: the row's run started more than 24 hours (reconcile.interval's
-- most: a round of the schedule runs every entry) before the newest row of
-- its source that is not a dry run (of a source with dry runs only, its
-- newest): no entry lists that scope any more (an entry removed or its
-- account label renamed; the whole-source runs recorded before migration
-- 071, which a GitHub entry never records), and its last outcome is not the
-- source's current state. The page lists such rows apart, without their
-- error badge: a failure of a removed entry stayed red for good (review
-- helper-327). While the schedule runs no entry at all, none is superseded.
--
-- Read through idx_reconcile_runs_scope_newest (079) as a loose index scan:
-- newest steps from one (source, scope) to the next, one probe of the index
-- each (its first entry of the scope is the row shown), and only those rows
-- are read whole (by_type can be long). The rows read are a few per scope,
-- however long the history: nothing deletes reconcile_runs, and with
-- reconcile.interval 1m it gains 1,440 rows a day per entry (a DISTINCT ON
-- over the whole table read and sorted 100,000 rows per page load, ~206 ms;
-- this reads 60, 0.5 ms).
WITH RECURSIVE newest AS (
    (SELECT r.source, coalesce(r.scope, '') AS scope, r.id FROM webhook_ingress.reconcile_runs r
     ORDER BY r.source, coalesce(r.scope, ''), r.dry_run, r.id DESC
     LIMIT 1)
    UNION ALL
    SELECT next.source, next.scope, next.id
    FROM newest n
    CROSS JOIN LATERAL (
        SELECT r.source, coalesce(r.scope, '') AS scope, r.id FROM webhook_ingress.reconcile_runs r
        WHERE (r.source, coalesce(r.scope, '')) > (n.source, n.scope)
        ORDER BY r.source, coalesce(r.scope, ''), r.dry_run, r.id DESC
        LIMIT 1) next
), shown AS (
    SELECT r.id, r.source, r.api, r.window_since, r.window_until, r.started_at, r.finished_at, r.dry_run,
           r.listed, r.already_stored, r.missing, r.stored, r.duplicates, r.by_type, r.error, r.scope,
           coalesce(max(r.started_at) FILTER (WHERE NOT r.dry_run) OVER (PARTITION BY r.source),
                    max(r.started_at) OVER (PARTITION BY r.source)) AS source_newest
    FROM webhook_ingress.reconcile_runs r
    WHERE r.id IN (SELECT newest.id FROM newest)
)
SELECT id, source, api, window_since, window_until, started_at, finished_at, dry_run,
       listed, already_stored, missing, stored, duplicates, by_type, error, scope,
       (started_at < source_newest - interval '24 hours')::boolean AS superseded
FROM shown
ORDER BY source, coalesce(scope, '');

-- name: ReconcileCoveredUntil :one
-- Where the compared time of the source's listing scope (a reconcile.sources
-- entry's: its account label, its Stripe types, its GitHub repository or
-- organization and hook, as account=us types=a,b; empty for the whole
-- source) first stops: the end of the earliest stretch of completed coverage
-- that a gap follows, else the end of the latest. A run covers the scope
-- when it listed that scope or the whole source (scope empty or NULL: a
-- Stripe run with neither an account label nor types, a run recorded before
-- migration 071): a run of another entry of the same source (another
-- account, other types, another hook) compared only what it listed, and its
-- window would close the gap of this one. The scheduled
-- reconcile reaches back to it after a failed round, a late one, or a
-- restart or failover to another streamer (a process's memory would forget
-- it). Not simply the latest end: a manual run (inlet reconcile
-- --since 2h) after failed rounds is recorded here too, and its end would
-- skip the stretch the failed rounds left uncompared.
--
-- Gaps and islands over the windows [window_since, window_until] of the
-- runs that read their whole window (finished, no error) and stored what was
-- missing (not dry runs): a still-running or killed run (finished_at NULL)
-- or a failed one covers nothing. A run ends at least(window_until,
-- started_at): it can only compare the events that existed when it listed
-- them, so a window ahead of the run (inlet reconcile --until a date,
-- midnight ahead) covers nothing of the future it never saw, and a run that
-- started before its window began covers nothing at all (started_at is the
-- database's clock; settle keeps a scheduled window well before it).
-- reached is how far the runs before a row, in window_since order, covered
-- (overlaps, nested windows and identical ends merge); a row that starts
-- after it opens a gap, and the first such gap (reached only grows) starts
-- at the smallest reached among them. A gap
-- that any later completed run covers merges away. A gap before the
-- earliest run is not one: the schedule had not started.
--
-- Only the last 30 days are read (what the providers keep): older runs
-- count as one point at not_before, so a gap just after it, left by runs
-- that failed for longer than that, still shows. No row: no completed run
-- covers the scope. reconcile_runs holds a row per run (a few a
-- day per entry): the (source, id) index narrows it to the source's.
WITH covered AS (
    SELECT window_since, least(window_until, started_at) AS window_until FROM webhook_ingress.reconcile_runs
    WHERE source = sqlc.arg(source)::text AND coalesce(scope, '') IN ('', sqlc.arg(scope)::text)
      AND finished_at IS NOT NULL AND error IS NULL AND NOT dry_run
      AND started_at > window_since AND least(window_until, started_at) >= sqlc.arg(not_before)::timestamptz
    UNION ALL
    (SELECT sqlc.arg(not_before)::timestamptz, sqlc.arg(not_before)::timestamptz FROM webhook_ingress.reconcile_runs
     WHERE source = sqlc.arg(source)::text AND coalesce(scope, '') IN ('', sqlc.arg(scope)::text)
       AND finished_at IS NOT NULL AND error IS NULL AND NOT dry_run
       AND started_at > window_since AND least(window_until, started_at) < sqlc.arg(not_before)::timestamptz
     LIMIT 1)
), ordered AS (
    SELECT window_since, window_until,
           max(window_until) OVER (ORDER BY window_since, window_until ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS reached
    FROM covered
)
SELECT coalesce(min(reached) FILTER (WHERE window_since > reached), max(window_until))::timestamptz AS covered_until
FROM ordered
HAVING count(*) > 0;
