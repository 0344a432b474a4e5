-- 048_event_types_seed_every_source: the event types of every source already
-- in the log are in event_types, marked alerted.
--
-- 013 seeded event_types from the log with one bound for all sources (the
-- first 10,000 (source, type) pairs in order): a log whose early sources
-- held many types (nothing capped them before 013) left later sources
-- unseeded, and their first event after the upgrade was alerted as a new
-- type, first seen at the upgrade (review helper-83:
-- TestUpgradeSeedsEveryKnownSource). This seeds each source that has no row
-- yet with the types it had in the log before 013 was applied (received
-- before its transaction began; a type first seen after that is new and
-- alerted as such), at most 101 of them (the cap of 100 named, the rest as
-- _other, as 013), by skip scans over idx_events_provider_type; a source
-- with rows is left as it is.

DO $$
DECLARE
    src  text;
    t013 timestamptz;
BEGIN
    SELECT applied_at INTO t013 FROM webhook_ingress.schema_migrations WHERE version = 13;
    IF t013 IS NULL THEN
        RETURN; -- migrated without the runner's record: nothing to tell old from new
    END IF;
    FOR src IN
        WITH RECURSIVE providers AS (
            (SELECT provider FROM webhook_ingress.events ORDER BY provider LIMIT 1)
            UNION ALL
            SELECT n.provider FROM providers p
            CROSS JOIN LATERAL (SELECT e.provider FROM webhook_ingress.events e
                                WHERE e.provider > p.provider ORDER BY e.provider LIMIT 1) n
        )
        SELECT p.provider FROM providers p
        WHERE NOT EXISTS (SELECT FROM webhook_ingress.event_types t WHERE t.provider = p.provider)
    LOOP
        WITH RECURSIVE types AS (
            (SELECT event_type FROM webhook_ingress.events WHERE provider = src ORDER BY event_type LIMIT 1)
            UNION ALL
            SELECT n.event_type FROM types t
            CROSS JOIN LATERAL (SELECT e.event_type FROM webhook_ingress.events e
                                WHERE e.provider = src AND e.event_type > t.event_type
                                ORDER BY e.event_type LIMIT 1) n
        ), found AS (
            SELECT t.event_type,
                   (SELECT min(e.received_at) FROM webhook_ingress.events e WHERE e.provider = src AND e.event_type = t.event_type) AS first_seen,
                   (SELECT max(e.received_at) FROM webhook_ingress.events e WHERE e.provider = src AND e.event_type = t.event_type) AS last_seen
            FROM types t
        ), old AS (
            SELECT * FROM found WHERE first_seen < t013 LIMIT 101
        ), ranked AS (
            SELECT f.*, CASE WHEN row_number() OVER (ORDER BY first_seen, event_type) <= 100 AND event_type <> '_other'
                             THEN event_type ELSE '_other' END AS dest
            FROM old f
        )
        INSERT INTO webhook_ingress.event_types (provider, event_type, first_seen, last_seen, alerted_at)
        SELECT src, dest, min(first_seen), max(last_seen), now() FROM ranked GROUP BY dest;
    END LOOP;
END
$$;
