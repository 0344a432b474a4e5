-- 012_occurred_at_payload: the provider's own event time (occurred_at) beside
-- received_at, and an optional parsed copy of the body (payload jsonb) for
-- auditors' JSON-path queries (inlet events list --where). Both are derived
-- from what arrived; raw_body stays the record and the only input to
-- re-verification, and neither is sealed by the audit.
--
-- Safe on a large live log:
--   * both columns are nullable without a default: adding them rewrites
--     nothing, and old rows read NULL;
--   * the GIN index on payload is made on the parent ON ONLY (instant) and
--     built inline only on partitions small enough to take no noticeable time
--     (at most 10,000 rows); each larger partition is left for
--     schema.BuildIndexes, which inlet migrate runs after this transaction has
--     committed, with CREATE INDEX CONCURRENTLY (ingest goes on) and prints
--     (until every partition has it, the parent index is invalid and --where
--     queries scan those partitions);
--   * lock_timeout bounds how long this transaction waits for its ACCESS
--     EXCLUSIVE lock behind a long query (ingest waits behind that wait);
--     when it expires, nothing changed: run inlet migrate again;
--   * old rows stay NULL until the owner runs inlet backfill stored, which
--     fills them from the stored bytes in resumable batches (progress in
--     derived_backfill). That is the only UPDATE events allows: see
--     events_guard.

SET LOCAL lock_timeout = '10s';

ALTER TABLE webhook_ingress.events
    ADD COLUMN occurred_at timestamptz,
    ADD COLUMN payload jsonb;

COMMENT ON COLUMN webhook_ingress.events.occurred_at IS
    'When the provider says the event happened, from its documented field (Stripe created, Paddle occurred_at, Shopify X-Shopify-Triggered-At, Slack event_time, GitLab object_attributes.updated_at, Standard Webhooks timestamp, or a source''s occurred_at_header/occurred_at_json); NULL when the provider sends none (GitHub, Twilio) or it is missing or malformed. received_at - occurred_at is the provider''s delivery lag.';
COMMENT ON COLUMN webhook_ingress.events.payload IS
    'A parsed copy of raw_body for JSON-path queries (sources.<name>.store_json); NULL when the source keeps none, the body is not JSON PostgreSQL accepts, or it is over store_json_max_bytes. Never used for verification; raw_body is the record. Readable by the roles that read raw_body, and only by them.';

-- The ingress role writes them; every role that reads raw_body reads them (its
-- table-wide SELECT covers new columns); the column-listed readers (streamer,
-- sealer) get neither.
GRANT INSERT (occurred_at, payload) ON webhook_ingress.events TO webhook_ingress_writer;

-- The payload index ------------------------------------------------------------------

CREATE INDEX idx_events_payload ON ONLY webhook_ingress.events USING gin (payload jsonb_path_ops);
COMMENT ON INDEX webhook_ingress.idx_events_payload IS
    'GIN (jsonb_path_ops) for payload @? / @@ JSON-path predicates. Built per partition; invalid until every partition has its own (inlet migrate builds the large ones CONCURRENTLY).';

DO $$
DECLARE
    part regclass;
    idx  text;
BEGIN
    FOR part IN
        SELECT i.inhrelid::regclass FROM pg_catalog.pg_inherits i
        WHERE i.inhparent = 'webhook_ingress.events'::regclass
    LOOP
        EXECUTE format('SELECT count(*) > 10000 FROM (SELECT FROM %s LIMIT 10001) s', part) INTO STRICT idx;
        IF idx::boolean THEN
            CONTINUE; -- left to schema.BuildIndexes (CONCURRENTLY)
        END IF;
        idx := (SELECT c.relname FROM pg_catalog.pg_class c WHERE c.oid = part) || '_payload_idx';
        EXECUTE format('CREATE INDEX %I ON %s USING gin (payload jsonb_path_ops)', idx, part);
        EXECUTE format('ALTER INDEX webhook_ingress.idx_events_payload ATTACH PARTITION webhook_ingress.%I', idx);
    END LOOP;
END
$$;

-- The one UPDATE events allows ------------------------------------------------------

-- Progress of inlet backfill stored: the last event id it filled, so a run
-- that stopped resumes there.
CREATE TABLE webhook_ingress.derived_backfill (
    name          text        PRIMARY KEY,
    last_event_id bigint      NOT NULL,
    until_id      bigint      NOT NULL,
    updated_at    timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE webhook_ingress.derived_backfill IS
    'Progress of inlet backfill stored (owner only): events with id <= last_event_id have had occurred_at and payload filled from their stored bytes, up to until_id, the newest event when the backfill began.';
REVOKE ALL ON webhook_ingress.derived_backfill FROM PUBLIC;
GRANT SELECT ON webhook_ingress.derived_backfill TO webhook_auditor, webhook_operator;

-- events stays append-only: every UPDATE and DELETE is refused, for every role
-- and the owner, except one that the owner's backfill makes with
-- webhook_ingress.backfill = 'derived' set in its transaction, and that only
-- fills occurred_at and payload where they were NULL, changes no other
-- column, and sets payload to exactly the parsed raw_body. No application
-- role holds UPDATE on events at all.
CREATE FUNCTION webhook_ingress.events_guard() RETURNS trigger
    LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS
$$
BEGIN
    IF TG_OP = 'UPDATE'
       AND current_setting('webhook_ingress.backfill', true) = 'derived'
       AND (OLD.occurred_at IS NULL OR NEW.occurred_at IS NOT DISTINCT FROM OLD.occurred_at)
       AND (OLD.payload IS NULL OR NEW.payload IS NOT DISTINCT FROM OLD.payload)
       -- body_sha256 is generated: NULL in NEW until after BEFORE triggers,
       -- and derived from raw_body, which is compared.
       AND (to_jsonb(OLD) - 'occurred_at' - 'payload' - 'body_sha256')
           = (to_jsonb(NEW) - 'occurred_at' - 'payload' - 'body_sha256')
       AND (NEW.payload IS NULL OR NEW.payload IS NOT DISTINCT FROM OLD.payload
            OR NEW.payload = convert_from(NEW.raw_body, 'UTF8')::jsonb)
    THEN
        RETURN NEW;
    END IF;
    RAISE EXCEPTION '%.% is append-only: % is not allowed', TG_TABLE_SCHEMA, TG_TABLE_NAME, TG_OP
        USING ERRCODE = 'insufficient_privilege';
END
$$;
REVOKE ALL ON FUNCTION webhook_ingress.events_guard() FROM PUBLIC;

DROP TRIGGER events_append_only_row ON webhook_ingress.events;
CREATE TRIGGER events_append_only_row
    BEFORE UPDATE OR DELETE ON webhook_ingress.events
    FOR EACH ROW EXECUTE FUNCTION webhook_ingress.events_guard();
ALTER TABLE webhook_ingress.events ENABLE ALWAYS TRIGGER events_append_only_row;
