-- 065_source_alerts_last_seen: source_alerts keeps the last_seen and the
-- threshold it reported, so that only a new delivery resumes a source
-- (review helper-168).
--
-- The detector judges a source from its newest arrivals. A source reported
-- silent for weeks loses them to retention (retention.max_age): with fewer
-- than min_events left and no max_silence nothing could judge it, so it was
-- judged not silent and reported "resumed" (last_seen 0001-01-01), or,
-- without a sources: configuration, "removed", although the provider still
-- sends nothing. Now a source whose row says silent, with a last_seen, and
-- that is too thinly recorded to judge stays silent until an arrival newer
-- than that last_seen exists. Both columns are NULL in a row written before
-- this migration, or by a streamer of the previous version (which leaves
-- them as they were): such a row is judged as before.
ALTER TABLE webhook_ingress.source_alerts
    ADD COLUMN IF NOT EXISTS last_seen timestamptz,
    ADD COLUMN IF NOT EXISTS threshold interval;
COMMENT ON COLUMN webhook_ingress.source_alerts.last_seen IS
    'The newest signed arrival when the report was sent (065); a source reported silent stays silent, whatever retention drops, until an arrival newer than this. NULL: no arrival then, or reported before 065.';
COMMENT ON COLUMN webhook_ingress.source_alerts.threshold IS
    'The silence threshold reported (065): Factor × the median gap, min_silence or max_silence. NULL: nothing judged it, or reported before 065.';

-- The sources silent now: their newest signed arrival is the last_seen the
-- detector reported (unless one arrived since its last check), so they are
-- held from the first check after the upgrade. Each is one probe of
-- idx_events_provider_received_at.
UPDATE webhook_ingress.source_alerts a
SET last_seen = (SELECT e.received_at FROM webhook_ingress.events e
                 WHERE e.provider = a.source AND e.signature_verified
                 ORDER BY e.received_at DESC LIMIT 1)
WHERE a.silent AND a.last_seen IS NULL;
