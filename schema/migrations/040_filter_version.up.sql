-- 040_filter_version: ingress routes an event to the filtered subscriptions
-- by its own copy of them (read again every second), the events_fan_out
-- trigger to the others by the subscriptions as they are when it runs. A
-- filter added to a subscription that had none made the trigger skip that
-- subscription at once, while ingress's copy did not know the filter yet:
-- events that both the old and the new rule let through got no job of its
-- handler, silently, for up to a second (and a new filtered subscription,
-- or a changed expression, applied a second late).
--
-- Now every change that moves a subscription into, out of or within
-- filtered routing (one with a filter inserted or deleted; its filter,
-- enabled or patterns changed) bumps webhook_ingress.filter_version in the
-- same transaction. Ingress's insert statement says which version its copy
-- was read at (set_config('inlet.filter_version', ..., true)), and the
-- trigger checks it in the very statement that reads the subscriptions (a
-- one-time filter: the same snapshot): when the version moved, the insert
-- fails with SQLSTATE IN001, nothing is stored, and ingress reads the
-- subscriptions again, matches the events again and stores them again.
-- When it has not moved, the trigger routes by the subscriptions the copy
-- holds. fan_out_filtered, the statement after the insert that makes the
-- jobs of the filters ingress evaluated, checks it the same way. No
-- statement is added to the insert.
--
-- A consumer re-registering its unchanged subscriptions bumps nothing. An
-- insert that says no version (backfill through an older binary, a row
-- written by hand, an ingress of before 040) is not checked.

CREATE TABLE webhook_ingress.filter_version (
    one     boolean PRIMARY KEY DEFAULT true CHECK (one),
    version bigint  NOT NULL
);
INSERT INTO webhook_ingress.filter_version (one, version) VALUES (true, 1);
COMMENT ON TABLE webhook_ingress.filter_version IS
    'Bumped by every change to filtered routing (040): ingress checks its copy of the filtered subscriptions against it when it stores events.';
GRANT SELECT ON webhook_ingress.filter_version TO webhook_ingress_writer;

CREATE FUNCTION webhook_ingress.bump_filter_version()
    RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS
$$
BEGIN
    UPDATE webhook_ingress.filter_version SET version = version + 1;
    RETURN NULL;
END
$$;
REVOKE ALL ON FUNCTION webhook_ingress.bump_filter_version() FROM PUBLIC;

CREATE TRIGGER subscriptions_filter_version_insert
    AFTER INSERT ON webhook_ingress.subscriptions
    FOR EACH ROW WHEN (NEW.filter IS NOT NULL)
    EXECUTE FUNCTION webhook_ingress.bump_filter_version();
CREATE TRIGGER subscriptions_filter_version_delete
    AFTER DELETE ON webhook_ingress.subscriptions
    FOR EACH ROW WHEN (OLD.filter IS NOT NULL)
    EXECUTE FUNCTION webhook_ingress.bump_filter_version();
CREATE TRIGGER subscriptions_filter_version_update
    AFTER UPDATE ON webhook_ingress.subscriptions
    FOR EACH ROW WHEN (OLD.filter IS DISTINCT FROM NEW.filter
                       OR ((OLD.filter IS NOT NULL OR NEW.filter IS NOT NULL)
                           AND (OLD.enabled IS DISTINCT FROM NEW.enabled
                                OR OLD.provider_pattern IS DISTINCT FROM NEW.provider_pattern
                                OR OLD.event_type_pattern IS DISTINCT FROM NEW.event_type_pattern)))
    EXECUTE FUNCTION webhook_ingress.bump_filter_version();

-- filter_version_holds is true when the inserting statement said no
-- version, or the one it said is current; otherwise it fails the statement
-- with IN001. STABLE: it reads filter_version with its caller's snapshot,
-- the one the fan-out reads the subscriptions with.
CREATE FUNCTION webhook_ingress.filter_version_holds()
    RETURNS boolean
    LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS
$$
DECLARE
    claimed text := current_setting('inlet.filter_version', true);
    current_version bigint;
BEGIN
    IF claimed IS NULL OR claimed = '' THEN
        RETURN true;
    END IF;
    SELECT version INTO current_version FROM webhook_ingress.filter_version;
    IF current_version IS DISTINCT FROM claimed::bigint THEN
        RAISE EXCEPTION 'filtered subscriptions changed since they were read (version % now, % read)', current_version, claimed
            USING ERRCODE = 'IN001';
    END IF;
    RETURN true;
END
$$;
REVOKE ALL ON FUNCTION webhook_ingress.filter_version_holds() FROM PUBLIC;

-- The fan-out of 019, checking the version first (a qual without columns:
-- evaluated once, before any row, even when no subscription matches).
CREATE OR REPLACE FUNCTION webhook_ingress.events_fan_out() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
    SET plan_cache_mode = force_generic_plan AS
$$
BEGIN
    INSERT INTO webhook_ingress.jobs (event_id, event_received_at, handler, provider, event_type, max_attempts, trace_parent, order_key, order_at)
    SELECT e.id, e.received_at, s.handler, e.provider, e.event_type, max(s.max_attempts), e.trace_parent,
           max(webhook_ingress.order_key_of(s.order_key, e.payload, e.headers)),
           max(CASE WHEN s.order_key IS NOT NULL THEN coalesce(e.occurred_at, e.received_at) END)
    FROM new_events e
    JOIN webhook_ingress.subscriptions s
      ON s.enabled
     AND s.filter IS NULL
     AND e.provider LIKE s.provider_like
     AND e.event_type LIKE s.event_type_like
    WHERE webhook_ingress.filter_version_holds()
    GROUP BY e.id, e.received_at, s.handler, e.provider, e.event_type, e.trace_parent
    ON CONFLICT (event_id, handler, event_received_at) DO NOTHING;
    RETURN NULL;
END
$$;

-- fan_out_filtered of 019 checks the version too, in the statement that
-- reads the subscriptions: it runs after the insert, on a newer snapshot, and
-- a change committed between the two (a filter removed: the trigger skipped
-- the subscription as filtered, and this statement would drop the pair as
-- no longer filtered) would otherwise leave the event with no job of that
-- handler. The setting is still the insert's: one implicit transaction.
CREATE OR REPLACE FUNCTION webhook_ingress.fan_out_filtered(p_providers text[], p_external_ids text[], p_subscriptions bigint[])
    RETURNS bigint
    LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
    SET plan_cache_mode = force_generic_plan AS
$$
    WITH created AS (
        INSERT INTO webhook_ingress.jobs (event_id, event_received_at, handler, provider, event_type, max_attempts, trace_parent, order_key, order_at)
        SELECT e.id, e.received_at, s.handler, e.provider, e.event_type, max(s.max_attempts), e.trace_parent,
               max(webhook_ingress.order_key_of(s.order_key, e.payload, e.headers)),
               max(CASE WHEN s.order_key IS NOT NULL THEN coalesce(e.occurred_at, e.received_at) END)
        FROM unnest(p_providers, p_external_ids, p_subscriptions) AS u(provider, external_event_id, subscription_id)
        JOIN webhook_ingress.event_keys k
          ON k.provider = u.provider AND k.external_event_id = u.external_event_id
         AND k.xmin = pg_current_xact_id()::xid
        JOIN webhook_ingress.events e ON e.id = k.event_id AND e.received_at = k.received_at
        JOIN webhook_ingress.subscriptions s
          ON s.id = u.subscription_id AND s.enabled AND s.filter IS NOT NULL
         AND e.provider LIKE s.provider_like AND e.event_type LIKE s.event_type_like
        WHERE webhook_ingress.filter_version_holds()
        GROUP BY e.id, e.received_at, s.handler, e.provider, e.event_type, e.trace_parent
        ON CONFLICT (event_id, handler, event_received_at) DO NOTHING
        RETURNING 1
    )
    SELECT count(*) FROM created
$$;
