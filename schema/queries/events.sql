-- Queries on webhook_ingress.events. The log is append-only: there is no
-- UPDATE or DELETE here, and no role could run one.

-- name: InsertEvent
-- One verified webhook. A duplicate (provider, external_event_id) inserts
-- nothing (the events_dedupe trigger claims the key in event_keys first, and
-- skips the row when it is taken, waiting on a concurrent insert of the same
-- key); RowsAffected tells stored (1) from duplicate (0). No RETURNING: the
-- ingress role may read only the dedupe key.
INSERT INTO webhook_ingress.events
    (provider, scheme, external_event_id, event_type, headers, raw_body, signature_verified, secret_index, request_uri, trace_parent)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, nullif($10, ''))
