-- 013_event_types: no event type dropped unseen. Every (source, event type)
-- that arrives is recorded with when it was first and last seen, how many
-- events it brought and how many of them created no job (unrouted), so
-- inlet events types, the dashboard, the inlet_events_unrouted_total metric
-- and the new-type alert can show it.
--
-- Hot rows: a summary row per popular type, updated by every ingest
-- transaction, would serialize group commit's committers on its row lock
-- until each COMMIT. So the insert path only appends: a statement trigger on
-- events adds one event_type_arrivals row per (source, type) of the
-- statement (its event ids), in the event's own transaction (a crash cannot
-- lose the fact that a type was seen, nor count an event that did not
-- commit), and
-- fold_event_types(), run by the streamer every few seconds (and by inlet
-- events types before it reads), folds those rows into event_types under an
-- advisory lock. No ingest statement ever waits on another's row.
--
-- Bounded: a source keeps at most fold_event_types' p_max_types named types
-- (inlet's heartbeat.max_types_per_source, default 100); any later new type
-- is counted in the source's '_other' row. The type header of GitHub and
-- Shopify is not signed: a replayed request with random types adds to
-- '_other', never a row, a metric series or an alert per type.
--
-- Upgrade safety: two new small tables and a trigger; events is not
-- rewritten. The seed below finds the types already in the log by a skip
-- scan of idx_events_provider_type (one index probe per distinct type per
-- partition, never a scan of the log), bounded to 10,000 types, so it runs
-- in well under a second on a log of millions while ingest waits only for
-- the trigger's lock. Seeded types count no events (events = 0: the count
-- starts at the upgrade) and are marked alerted, so the upgrade raises no
-- flood of "new type" alerts.

CREATE TABLE webhook_ingress.event_types (
    provider         text        NOT NULL,
    event_type       text        NOT NULL,
    first_seen       timestamptz NOT NULL,
    last_seen        timestamptz NOT NULL,
    events           bigint      NOT NULL DEFAULT 0,
    unrouted_events  bigint      NOT NULL DEFAULT 0,
    last_routed_at   timestamptz,
    first_unrouted_at timestamptz,
    last_unrouted_at timestamptz,
    routed           boolean     GENERATED ALWAYS AS (
        CASE WHEN last_routed_at IS NULL AND last_unrouted_at IS NULL THEN NULL
             ELSE last_routed_at IS NOT NULL AND (last_unrouted_at IS NULL OR last_routed_at >= last_unrouted_at) END) STORED,
    alerted_at       timestamptz,
    PRIMARY KEY (provider, event_type)
);
COMMENT ON TABLE webhook_ingress.event_types IS
    'Every (source, event type) seen: first and last arrival, events and unrouted events (those that created no job). At most heartbeat.max_types_per_source named types per source; later new types are counted in the source''s ''_other'' row. Folded from event_type_arrivals by fold_event_types().';
COMMENT ON COLUMN webhook_ingress.event_types.event_type IS
    'The event type as stored on events; ''_other'' for every type past the source''s cap (type headers of some providers are not signed).';
COMMENT ON COLUMN webhook_ingress.event_types.events IS
    'Events of this type stored since 013 was applied (types already in the log then start at 0).';
COMMENT ON COLUMN webhook_ingress.event_types.unrouted_events IS
    'Of those, events no enabled subscription matched: they created no job. inlet replay --handler H --unrouted delivers them to a handler subscribed later.';
COMMENT ON COLUMN webhook_ingress.event_types.first_unrouted_at IS
    'The earliest unrouted event: inlet replay --unrouted looks for events without a job from here on.';
COMMENT ON COLUMN webhook_ingress.event_types.routed IS
    'Whether the latest event of this type created a job; NULL for a type seen only before 013 (not known).';
COMMENT ON COLUMN webhook_ingress.event_types.alerted_at IS
    'When the "new event type" log line and alert went out; NULL until the streamer has sent it (retried while the alert URL fails).';

CREATE TABLE webhook_ingress.event_type_arrivals (
    provider     text          NOT NULL,
    event_type   text          NOT NULL,
    event_ids    bigint[]      NOT NULL,
    received_ats timestamptz[] NOT NULL
) WITH (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 1000);
COMMENT ON TABLE webhook_ingress.event_type_arrivals IS
    'Per ingest statement, the events it stored by (source, type), appended by the events_type_seen trigger and emptied into event_types by fold_event_types(). Append-only on the hot path so no ingest waits on a shared row.';

-- One row per (source, type) of the inserting statement, in its transaction.
-- Whether an event is routed is decided at the fold, after its transaction
-- committed: jobs may come from this statement's events_fan_out trigger or
-- from a later statement of the same transaction (ingress's filtered
-- fan-out), and only the committed state says "no job at all".
CREATE FUNCTION webhook_ingress.events_type_seen() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS
$$
BEGIN
    INSERT INTO webhook_ingress.event_type_arrivals (provider, event_type, event_ids, received_ats)
    SELECT e.provider, e.event_type, array_agg(e.id), array_agg(e.received_at)
    FROM new_events e
    GROUP BY e.provider, e.event_type;
    RETURN NULL;
END
$$;

CREATE TRIGGER events_type_seen
    AFTER INSERT ON webhook_ingress.events
    REFERENCING NEW TABLE AS new_events
    FOR EACH STATEMENT EXECUTE FUNCTION webhook_ingress.events_type_seen();
ALTER TABLE webhook_ingress.events ENABLE ALWAYS TRIGGER events_type_seen;

-- Fold the arrivals into event_types: an event with no job is unrouted;
-- known types add up; a new type gets a row while its source has fewer than
-- p_max_types named types, and is counted in the source's '_other' row
-- otherwise. One statement (the DELETE … RETURNING feeds the upsert), so an
-- arrival committed meanwhile is either folded or left for the next fold,
-- never lost. Serialized by an advisory lock: folds never interleave, so the
-- cap holds. Returns how many event_types rows it wrote.
CREATE FUNCTION webhook_ingress.fold_event_types(p_max_types integer) RETURNS bigint
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS
$$
DECLARE
    n bigint;
BEGIN
    IF p_max_types IS NULL OR p_max_types < 1 THEN
        RAISE EXCEPTION 'max types per source %: must be at least 1', p_max_types
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    PERFORM pg_advisory_xact_lock(hashtextextended('inlet:fold-event-types', 0));
    WITH d AS (
        DELETE FROM webhook_ingress.event_type_arrivals RETURNING provider, event_type, event_ids, received_ats
    ), x AS (
        -- The jobs key is (event_id, handler, event_received_at): with the
        -- partition key, each probe reads one partition's index.
        SELECT d.provider, d.event_type, u.received_at,
               EXISTS (SELECT 1 FROM webhook_ingress.jobs j
                       WHERE j.event_id = u.id AND j.event_received_at = u.received_at) AS routed
        FROM d CROSS JOIN LATERAL unnest(d.event_ids, d.received_ats) AS u(id, received_at)
    ), a AS (
        SELECT provider, event_type, min(received_at) AS first_seen, max(received_at) AS last_seen,
               count(*) AS events, count(*) FILTER (WHERE NOT routed) AS unrouted_events,
               max(received_at) FILTER (WHERE routed) AS last_routed_at,
               min(received_at) FILTER (WHERE NOT routed) AS first_unrouted_at,
               max(received_at) FILTER (WHERE NOT routed) AS last_unrouted_at
        FROM x GROUP BY provider, event_type
    ), k AS (
        SELECT a.*, (t.provider IS NOT NULL OR a.event_type = '_other') AS known
        FROM a LEFT JOIN webhook_ingress.event_types t USING (provider, event_type)
    ), used AS (
        SELECT provider, count(*) AS n FROM webhook_ingress.event_types WHERE event_type <> '_other' GROUP BY provider
    ), r AS (
        SELECT k.*,
               CASE WHEN k.known OR coalesce(u.n, 0)
                        + row_number() OVER (PARTITION BY k.provider, k.known ORDER BY k.first_seen, k.event_type) <= p_max_types
                    THEN k.event_type ELSE '_other' END AS dest
        FROM k LEFT JOIN used u USING (provider)
    )
    INSERT INTO webhook_ingress.event_types AS t
        (provider, event_type, first_seen, last_seen, events, unrouted_events, last_routed_at, first_unrouted_at, last_unrouted_at)
    SELECT provider, dest, min(first_seen), max(last_seen), sum(events), sum(unrouted_events),
           max(last_routed_at), min(first_unrouted_at), max(last_unrouted_at)
    FROM r GROUP BY provider, dest
    ON CONFLICT (provider, event_type) DO UPDATE SET
        first_seen        = least(t.first_seen, excluded.first_seen),
        last_seen         = greatest(t.last_seen, excluded.last_seen),
        events            = t.events + excluded.events,
        unrouted_events   = t.unrouted_events + excluded.unrouted_events,
        last_routed_at    = greatest(t.last_routed_at, excluded.last_routed_at),
        first_unrouted_at = least(t.first_unrouted_at, excluded.first_unrouted_at),
        last_unrouted_at  = greatest(t.last_unrouted_at, excluded.last_unrouted_at);
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END
$$;
COMMENT ON FUNCTION webhook_ingress.fold_event_types(integer) IS
    'Fold event_type_arrivals into event_types, at most p_max_types named types per source (the rest in ''_other''). Run by the streamer every heartbeat.types_every and by inlet events types; returns the event_types rows written.';

-- The types already in the log (see the header): a skip scan over
-- idx_events_provider_type, first and last arrival from the same index.
WITH RECURSIVE pairs AS (
    (SELECT provider, event_type FROM webhook_ingress.events ORDER BY provider, event_type LIMIT 1)
    UNION ALL
    SELECT n.provider, n.event_type
    FROM pairs p
    CROSS JOIN LATERAL (
        SELECT e.provider, e.event_type FROM webhook_ingress.events e
        WHERE (e.provider, e.event_type) > (p.provider, p.event_type)
        ORDER BY e.provider, e.event_type LIMIT 1
    ) n
), found AS (
    SELECT p.provider, p.event_type,
           (SELECT min(e.received_at) FROM webhook_ingress.events e WHERE e.provider = p.provider AND e.event_type = p.event_type) AS first_seen,
           (SELECT max(e.received_at) FROM webhook_ingress.events e WHERE e.provider = p.provider AND e.event_type = p.event_type) AS last_seen
    FROM (SELECT * FROM pairs LIMIT 10000) p
), ranked AS (
    SELECT f.*, CASE WHEN row_number() OVER (PARTITION BY provider ORDER BY first_seen, event_type) <= 100 AND event_type <> '_other'
                     THEN event_type ELSE '_other' END AS dest
    FROM found f
)
INSERT INTO webhook_ingress.event_types (provider, event_type, first_seen, last_seen, alerted_at)
SELECT provider, dest, min(first_seen), max(last_seen), now() FROM ranked GROUP BY provider, dest;

-- privileges ---------------------------------------------------------------------

REVOKE ALL ON webhook_ingress.event_types, webhook_ingress.event_type_arrivals FROM PUBLIC;
REVOKE ALL ON FUNCTION webhook_ingress.events_type_seen(), webhook_ingress.fold_event_types(integer) FROM PUBLIC;

-- Streamer: folds, exports the metric, sends the new-type alert and says so.
GRANT SELECT, UPDATE (alerted_at) ON webhook_ingress.event_types TO webhook_streamer;
GRANT EXECUTE ON FUNCTION webhook_ingress.fold_event_types(integer) TO webhook_streamer;
-- Operator: inlet events types, the dashboard, inlet replay --unrouted.
GRANT SELECT ON webhook_ingress.event_types TO webhook_operator;
GRANT EXECUTE ON FUNCTION webhook_ingress.fold_event_types(integer) TO webhook_operator;
-- Auditor: reads everything.
GRANT SELECT ON webhook_ingress.event_types, webhook_ingress.event_type_arrivals TO webhook_auditor;
