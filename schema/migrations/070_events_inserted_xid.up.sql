-- 070_events_inserted_xid: each event row records the transaction that
-- inserted it (inserted_xid), which an UPDATE keeps (review helper-216).
--
-- A listing's later pages show only the rows visible in its first page's
-- snapshot (admin.ListEvents; AdminListEvents). They judged a row by its
-- xmin, taken as the transaction that inserted it. It is not, for a row
-- inlet backfill stored has filled (occurred_at, payload: the one UPDATE
-- events_guard allows): the new row version's xmin is the backfill's
-- transaction, not visible in the first page's snapshot, so every event
-- the backfill filled between two pages was on no page at all. xmin is
-- 32 bits too, so it was judged only for rows received within the hour
-- before the first page (older ones may be frozen). inserted_xid is the
-- inserting transaction's 64-bit id (pg_current_xact_id(): the top-level
-- transaction's, which is what a pg_snapshot lists), so a row is judged
-- exactly, whatever its age and whatever filled it since.
--
-- Safe on a large live log (the upgrade rule since 012):
--   * the column is added nullable without a default: nothing is rewritten,
--     and rows stored before this migration read NULL (the listing judges
--     them by xmin as before);
--   * the default is set afterwards, so it applies to new rows only; it is
--     the parent's, which routes every insert through events (ingress,
--     reconcile, backfill) into any partition, the default one included
--     (set with ONLY: the parent's default is the one an insert through
--     the parent uses, whatever partition the row lands in, and setting
--     it needs no partition's ownership);
--   * both statements hold the ACCESS EXCLUSIVE lock for an instant, under
--     inlet migrate's 10 s lock_timeout (behind a long query: nothing
--     changed, run it again);
--   * it runs twice safely (IF NOT EXISTS; setting the default and the
--     comment again changes nothing).
--
-- Privileges: the roles that SELECT the whole table (operator, auditor,
-- worker, consumer roles) read it as every column; the column-listed
-- readers (streamer, sealer) and the ingress role's column-listed INSERT do
-- not get it, so no role but the owner may choose its value. events_guard
-- (012) compares every column but occurred_at, payload and body_sha256 of
-- OLD and NEW: the backfill's UPDATE keeps inserted_xid, and any change to
-- it is refused. The audit seals named columns (audit/hash.go), not this one.

-- Adding a column to events adds it to every partition, which takes owning
-- them all: a partition another login owns (060 could not give it to the
-- owner, and named it in a notice) stops this migration with what to run.
-- The default is the parent's alone (ONLY: no partition's ownership needed;
-- every insert goes through events, whose default applies in whatever
-- partition the row lands).
DO $$
BEGIN
    ALTER TABLE webhook_ingress.events ADD COLUMN IF NOT EXISTS inserted_xid pg_catalog.xid8;
EXCEPTION WHEN insufficient_privilege THEN
    RAISE EXCEPTION 'migration 070 adds column inserted_xid to webhook_ingress.events and so to each of its partitions: %', SQLERRM
        USING ERRCODE = 'insufficient_privilege',
              HINT = 'a partition belongs to a login this migration''s role may not act as (migration 060 named it in a notice): as that login or a superuser run ALTER TABLE webhook_ingress.<partition> OWNER TO <the owner of webhook_ingress.events>, then inlet migrate again';
END
$$;
ALTER TABLE ONLY webhook_ingress.events ALTER COLUMN inserted_xid SET DEFAULT pg_catalog.pg_current_xact_id();

COMMENT ON COLUMN webhook_ingress.events.inserted_xid IS
    'The transaction that inserted the row (pg_current_xact_id(), 64-bit), kept by the one UPDATE events allows (inlet backfill stored), unlike xmin: a listing''s later pages show a row only when this is visible in the first page''s snapshot. NULL for rows stored before migration 070.';
