-- 054_retention_keys_due: a dropped period's dedupe keys are deleted even
-- when the inlet retention that dropped it was interrupted.
--
-- inlet retention deleted a period's event_keys in a statement of its own
-- after drop_partition had committed (044: an old key arriving meanwhile
-- then waits on a row, not on a table). A run stopped between the two
-- (SIGTERM from a cron deadline, a lost connection, a lock wait) left the
-- keys behind for good: later runs list only partitions that exist, so a
-- redelivery of a dropped event was answered "duplicate" of an event the log
-- no longer held, and event_keys grew without bound (review helper-120:
-- tests TestRetentionInterruptedLeavesNoDedupeKeys).
--
-- The drop now records its period here in its own transaction; inlet
-- retention deletes the keys of every period recorded (this run's, and any
-- an interrupted run left) in one statement that also removes the records,
-- so the keys go at the next run if not at this one. The periods already in
-- retention_log are recorded once: their keys, if an interrupted run left
-- any, go at the first run after the upgrade (one scan of event_keys).

CREATE TABLE webhook_ingress.retention_keys_due (
    period_start timestamptz PRIMARY KEY,
    period_end   timestamptz NOT NULL,
    CONSTRAINT retention_keys_due_period CHECK (period_start < period_end)
);
COMMENT ON TABLE webhook_ingress.retention_keys_due IS
    'Periods inlet retention dropped whose dedupe keys (event_keys) are not deleted yet: written with the drop, emptied by the key deletion that follows it (or by the next run, when that one was interrupted).';
REVOKE ALL ON webhook_ingress.retention_keys_due FROM PUBLIC;

INSERT INTO webhook_ingress.retention_keys_due (period_start, period_end)
SELECT period_start, max(period_end) FROM webhook_ingress.retention_log GROUP BY period_start
ON CONFLICT DO NOTHING;
