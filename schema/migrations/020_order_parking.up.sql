-- Ordered jobs that wait are parked, so the claim never walks them.
--
-- With 019 alone, every job of a hot key waits in the claimable index, and
-- each claim probes all of them (order_blocked) to find the one that may
-- run: a key with 2,000 jobs ran at 29 jobs/s. Now a job that arrives behind
-- an unfinished earlier job of its key is parked: next_attempt_at is
-- webhook_ingress.order_parked_at(), far in the future, so it is outside the
-- claim's due range. When a keyed job finishes (completed, or dead_letter),
-- the trigger below makes the new head of its key due and wakes the
-- streamers. The claim's probe stays: it, not parking, keeps the order
-- (parking misses jobs inserted in the same statement or concurrently);
-- parking is only the shortcut. Whatever a trigger cannot see (a key's head
-- deleted, a handler's order_key removed, a policy changed to skip) the
-- streamers' sweep finds: UnparkOrderedJobs, every reap interval.

-- The next_attempt_at of a parked job: finite, so every reader of the
-- column can scan it.
CREATE FUNCTION webhook_ingress.order_parked_at() RETURNS timestamptz
    LANGUAGE sql IMMUTABLE PARALLEL SAFE AS
$$ SELECT timestamptz '3000-01-01 00:00:00+00' $$;

-- When a new job of (handler, key, at) becomes due: parked when an
-- earlier (or same-time, earlier-arrived) job of its key is unfinished.
CREATE FUNCTION webhook_ingress.order_due_at(p_handler text, p_key text, p_at timestamptz) RETURNS timestamptz
    LANGUAGE sql STABLE PARALLEL SAFE AS
$$
    SELECT CASE WHEN p_key IS NOT NULL AND webhook_ingress.order_blocked(p_handler, p_key, p_at, 9223372036854775807)
                THEN webhook_ingress.order_parked_at() ELSE now() END
$$;

-- The fan-outs of 019, parking what waits.
CREATE OR REPLACE FUNCTION webhook_ingress.events_fan_out() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS
$$
BEGIN
    INSERT INTO webhook_ingress.jobs (event_id, event_received_at, handler, provider, event_type, max_attempts, trace_parent, order_key, order_at, next_attempt_at)
    SELECT g.*, webhook_ingress.order_due_at(g.handler, g.order_key, g.order_at)
    FROM (
        SELECT e.id, e.received_at, s.handler, e.provider, e.event_type, max(s.max_attempts), e.trace_parent,
               max(webhook_ingress.order_key_of(s.order_key, e.payload, e.headers)) AS order_key,
               max(CASE WHEN s.order_key IS NOT NULL THEN coalesce(e.occurred_at, e.received_at) END) AS order_at
        FROM new_events e
        JOIN webhook_ingress.subscriptions s
          ON s.enabled
         AND s.filter IS NULL
         AND e.provider LIKE s.provider_like
         AND e.event_type LIKE s.event_type_like
        GROUP BY e.id, e.received_at, s.handler, e.provider, e.event_type, e.trace_parent
    ) g
    ON CONFLICT (event_id, handler, event_received_at) DO NOTHING;
    RETURN NULL;
END
$$;

CREATE OR REPLACE FUNCTION webhook_ingress.fan_out_filtered(p_providers text[], p_external_ids text[], p_subscriptions bigint[])
    RETURNS bigint
    LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS
$$
    WITH created AS (
        INSERT INTO webhook_ingress.jobs (event_id, event_received_at, handler, provider, event_type, max_attempts, trace_parent, order_key, order_at, next_attempt_at)
        SELECT g.*, webhook_ingress.order_due_at(g.handler, g.order_key, g.order_at)
        FROM (
            SELECT e.id, e.received_at, s.handler, e.provider, e.event_type, max(s.max_attempts), e.trace_parent,
                   max(webhook_ingress.order_key_of(s.order_key, e.payload, e.headers)) AS order_key,
                   max(CASE WHEN s.order_key IS NOT NULL THEN coalesce(e.occurred_at, e.received_at) END) AS order_at
            FROM unnest(p_providers, p_external_ids, p_subscriptions) AS u(provider, external_event_id, subscription_id)
            JOIN webhook_ingress.event_keys k
              ON k.provider = u.provider AND k.external_event_id = u.external_event_id
             AND k.xmin = pg_current_xact_id()::xid
            JOIN webhook_ingress.events e ON e.id = k.event_id AND e.received_at = k.received_at
            JOIN webhook_ingress.subscriptions s
              ON s.id = u.subscription_id AND s.enabled AND s.filter IS NOT NULL
             AND e.provider LIKE s.provider_like AND e.event_type LIKE s.event_type_like
            GROUP BY e.id, e.received_at, s.handler, e.provider, e.event_type, e.trace_parent
        ) g
        ON CONFLICT (event_id, handler, event_received_at) DO NOTHING
        RETURNING 1
    )
    SELECT count(*) FROM created
$$;

-- Make the head of (handler, key) due if it is parked, and wake the
-- streamers. The head is the first unfinished job in the key's order
-- (a dead letter counts under the policy block).
CREATE FUNCTION webhook_ingress.order_advance(p_handler text, p_key text) RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS
$$
DECLARE
    head record;
BEGIN
    SELECT j.id, j.event_received_at, j.status, j.next_attempt_at INTO head
    FROM webhook_ingress.jobs j
    WHERE j.handler = p_handler AND j.order_key = p_key
      AND j.status IN ('pending', 'leased', 'failed', 'dead_letter')
      AND (j.status <> 'dead_letter' OR NOT EXISTS (
          SELECT FROM webhook_ingress.subscriptions s WHERE s.handler = p_handler AND s.order_policy = 'skip'))
    ORDER BY j.order_at, j.id
    LIMIT 1;
    IF FOUND AND head.status IN ('pending', 'failed') AND head.next_attempt_at = webhook_ingress.order_parked_at() THEN
        UPDATE webhook_ingress.jobs
        SET next_attempt_at = now(), updated_at = now()
        WHERE id = head.id AND event_received_at = head.event_received_at
          AND next_attempt_at = webhook_ingress.order_parked_at();
        PERFORM pg_notify('webhook_ingress_jobs', '');
    END IF;
END
$$;

CREATE FUNCTION webhook_ingress.jobs_order_advance() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS
$$
BEGIN
    PERFORM webhook_ingress.order_advance(NEW.handler, NEW.order_key);
    RETURN NULL;
END
$$;

-- Only keyed jobs that finish run it; for every other update the WHEN is
-- the whole cost.
CREATE TRIGGER jobs_order_advance
    AFTER UPDATE OF status ON webhook_ingress.jobs
    FOR EACH ROW
    WHEN (NEW.order_key IS NOT NULL AND NEW.status IN ('completed', 'dead_letter') AND OLD.status IS DISTINCT FROM NEW.status)
    EXECUTE FUNCTION webhook_ingress.jobs_order_advance();

REVOKE EXECUTE ON FUNCTION webhook_ingress.order_advance(text, text) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION webhook_ingress.jobs_order_advance() FROM PUBLIC;
