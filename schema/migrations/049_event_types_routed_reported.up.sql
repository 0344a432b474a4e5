-- 049_event_types_routed_reported: a type that stops being routed is
-- reported, as a new type is.
--
-- The streamer logged and alerted a type once, when first seen; a type that
-- a subscription routed then and no longer does (the subscription disabled
-- or narrowed) went on unrouted with only the counter moving (review
-- helper-83: monitor TestTypeThatStopsBeingRoutedIsAlerted). Whether a type
-- is routed is judged here by the enabled subscriptions whose patterns
-- match it (type_subscribed), not by its latest event: under a content
-- filter the latest event is routed or not event by event, and alerts on
-- that flapped (review helper-89: TestFilteredTypeDoesNotFlapUnroutedAlerts).
-- event_types keeps what was last reported (alerted_routed); the streamer
-- reports a row whose subscription state moved away from it. Rows reported
-- already take their present state, so the upgrade alerts nothing. A
-- column added with no default: catalog only.

CREATE FUNCTION webhook_ingress.type_subscribed(p_provider text, p_event_type text)
    RETURNS boolean
    LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS
$$
    SELECT EXISTS (SELECT FROM webhook_ingress.subscriptions s
                   WHERE s.enabled AND p_provider LIKE s.provider_like AND p_event_type LIKE s.event_type_like)
$$;
COMMENT ON FUNCTION webhook_ingress.type_subscribed(text, text) IS
    'Whether an enabled subscription''s patterns match (provider, event type), filters aside: for the streamer, which may not read the patterns.';
REVOKE ALL ON FUNCTION webhook_ingress.type_subscribed(text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION webhook_ingress.type_subscribed(text, text) TO webhook_streamer;

ALTER TABLE webhook_ingress.event_types ADD COLUMN alerted_routed boolean;
COMMENT ON COLUMN webhook_ingress.event_types.alerted_routed IS
    'Whether a subscription matched the type when the streamer last logged and alerted it (type_subscribed); a row whose state moved away from it is reported again.';
UPDATE webhook_ingress.event_types SET alerted_routed = webhook_ingress.type_subscribed(provider, event_type)
WHERE alerted_at IS NOT NULL AND event_type <> '_other';
GRANT UPDATE (alerted_routed) ON webhook_ingress.event_types TO webhook_streamer;
