-- 049_event_types_routed_reported: a type that stops being routed is
-- reported, as a new type is.
--
-- The streamer logged and alerted a type once, when first seen; a type that
-- a subscription routed then and no longer does (the subscription disabled
-- or narrowed) went on unrouted with only the counter moving (review
-- helper-83: monitor TestKnownLimitTypeThatStopsBeingRoutedIsNotAlerted,
-- now TestTypeThatStopsBeingRoutedIsAlerted). event_types now keeps what was
-- last reported of routed; the streamer reports a row whose routed moved
-- away from it (alerting when it became unrouted) and records the new state.
-- Rows reported already take their present state, so the upgrade alerts
-- nothing. A column added with no default: catalog only.

ALTER TABLE webhook_ingress.event_types ADD COLUMN alerted_routed boolean;
COMMENT ON COLUMN webhook_ingress.event_types.alerted_routed IS
    'routed as last logged and alerted by the streamer (NULL: not known then); a row whose routed moved away from it is reported again.';
UPDATE webhook_ingress.event_types SET alerted_routed = routed WHERE alerted_at IS NOT NULL;
GRANT UPDATE (alerted_routed) ON webhook_ingress.event_types TO webhook_streamer;
