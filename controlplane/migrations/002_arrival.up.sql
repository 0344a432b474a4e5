-- 002_arrival: each record's place in its tenant's arrival order, so that a
-- reporter notices a restore from a backup that lost only records stored
-- under ids below the cursor (attempts that committed late): the highest
-- attempt id held does not move then, the highest arrival number does.
--
-- Idempotent, and safe on a live table of any size: the column is added
-- without a default (metadata only: rows stored before stay NULL, nothing
-- is rewritten), the counter is a new table of one row per tenant, and the
-- index is partial over the rows that have a number (none yet). Building
-- it still reads the table once, and inserts wait meanwhile (reports are
-- answered late or retried; nothing is lost, the page is served). To avoid
-- that wait on a very large table, run the ALTER TABLE below and then
-- CREATE INDEX CONCURRENTLY with this index's name and definition before
-- upgrading: IF NOT EXISTS keeps it (drop it first if that build failed:
-- an invalid index is kept too, and not used).

CREATE TABLE IF NOT EXISTS control_plane.arrivals (
    tenant text   NOT NULL,
    last   bigint NOT NULL,
    CONSTRAINT arrivals_pkey PRIMARY KEY (tenant),
    CONSTRAINT arrivals_last_check CHECK (last >= 0)
);

ALTER TABLE control_plane.attempts ADD COLUMN IF NOT EXISTS arrival bigint;

CREATE INDEX IF NOT EXISTS idx_attempts_tenant_arrival ON control_plane.attempts (tenant, arrival)
    WHERE arrival IS NOT NULL;

COMMENT ON TABLE control_plane.arrivals IS
    'The last arrival number given to each tenant''s records. Its row lock, held by a report until it commits, makes a tenant''s numbers follow the order its reports commit in.';
COMMENT ON COLUMN control_plane.attempts.arrival IS
    'The record''s place in its tenant''s arrival order (numbers of records a report already held are skipped). NULL for records stored before migration 002.';
COMMENT ON INDEX control_plane.idx_attempts_tenant_arrival IS
    'The tenant''s highest arrival number held, answered with each report: lower than a reporter had acknowledged, this database lost records (restored from a backup). Partial: rows stored before migration 002 have none.';
