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
-- same transaction, and ingress stores each batch with
-- fan_out_filtered(..., version): the version its copy was read at. That
-- statement runs after the insert (and its trigger) in the same
-- transaction, on a newer snapshot; when the version moved since the copy
-- was read, it fails with SQLSTATE IN001, the transaction rolls back, and
-- ingress reads the subscriptions again and stores the events again. When it
-- has not moved, the trigger saw the subscriptions the copy holds.
--
-- A consumer re-registering its unchanged subscriptions bumps nothing. An
-- ingress of an earlier version keeps calling the three-argument function,
-- which is unchanged (and keeps its one-second window).

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

CREATE FUNCTION webhook_ingress.fan_out_filtered(p_providers text[], p_external_ids text[], p_subscriptions bigint[], p_version bigint)
    RETURNS bigint
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
    SET plan_cache_mode = force_generic_plan AS
$$
DECLARE
    current_version bigint;
BEGIN
    SELECT version INTO current_version FROM webhook_ingress.filter_version;
    IF current_version IS DISTINCT FROM p_version THEN
        RAISE EXCEPTION 'filtered subscriptions changed since they were read (version % now, % read)', current_version, p_version
            USING ERRCODE = 'IN001';
    END IF;
    IF coalesce(cardinality(p_subscriptions), 0) = 0 THEN
        RETURN 0;
    END IF;
    RETURN webhook_ingress.fan_out_filtered(p_providers, p_external_ids, p_subscriptions);
END
$$;
REVOKE ALL ON FUNCTION webhook_ingress.fan_out_filtered(text[], text[], bigint[], bigint) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION webhook_ingress.fan_out_filtered(text[], text[], bigint[], bigint) TO webhook_ingress_writer;
