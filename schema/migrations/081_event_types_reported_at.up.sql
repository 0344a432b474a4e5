-- 081_event_types_reported_at: event_types keeps when a type's latest
-- report was recorded, so that each "no longer routed" alert carries an
-- alert_id of its own (review helper-334).
--
-- The streamer named an event_type_unrouted alert (alert_id) by the source,
-- the type, the status and the row's last_routed_at, which only the fold
-- moves (when an event of the type creates a job). A type that stopped
-- being routed, was routed again (its subscription enabled: logged and
-- recorded) and stopped again before any event of it arrived was alerted
-- twice with one alert_id, and a sink that drops an alert_id it took
-- dropped the second (monitor TestUnroutedAlertIDMovesOnEachReport).
-- alerted_at is set once, by the first report (new_event_type). Now every
-- recorded report (new, no longer routed, routed again:
-- MonitorEventTypeAlerted) stamps reported_at, and an unrouted alert is
-- named by the report it follows, as a silence alert is by source_alerts'
-- reported_at: every POST of one report (sent again after a lost answer)
-- has one alert_id, and each report another. NULL in a row not reported
-- since this migration (the streamer then names the alert by alerted_at),
-- and left as it was by a streamer of the previous version during an
-- upgrade.
--
-- Safe on a large live log: events and jobs are untouched; event_types has
-- a row per (source, type), at most silence.max_types_per_source per
-- source. A column added with no default changes the catalog only, under
-- inlet migrate's 10 s lock_timeout for event_types' ACCESS EXCLUSIVE lock
-- (a fold or an alert's claim holding a row meanwhile makes it wait; ingest
-- does not touch the table). Runs twice safely: IF NOT EXISTS, and a
-- comment or a privilege set again changes nothing.
ALTER TABLE webhook_ingress.event_types ADD COLUMN IF NOT EXISTS reported_at timestamptz;
COMMENT ON COLUMN webhook_ingress.event_types.reported_at IS
    'When the streamer last recorded a report of the type (new, no longer routed, routed again; 081): the next "no longer routed" alert is named by it (alert_id). NULL: not reported since 081 (alerted_at stands for it).';
GRANT UPDATE (reported_at) ON webhook_ingress.event_types TO webhook_streamer;
