-- Queries on webhook_ingress.events. The log is append-only: there is no
-- UPDATE or DELETE here, and no role could run one.

-- name: InsertEvent :execrows
-- One verified webhook. A duplicate (provider, external_event_id) inserts
-- nothing (the events_dedupe trigger claims the key in event_keys first, and
-- skips the row when it is taken, waiting on a concurrent insert of the same
-- key); RowsAffected tells stored (1) from duplicate (0). No RETURNING: the
-- ingress role may read only the dedupe key. $11 true stores the parsed body
-- as payload, parsed here from $6 so the body crosses the wire once (ingress
-- sets it only for a body ingress.JSONCopyable accepts); $12 occurred_at or
-- NULL. $13 is the version of filtered routing ingress matched the event
-- at (IngressFilterVersion; 0: none, not checked): the events_fan_out
-- trigger fails the insert with SQLSTATE IN001 when it moved (040).
INSERT INTO webhook_ingress.events
    (provider, scheme, external_event_id, event_type, headers, raw_body, signature_verified, secret_index, request_uri, trace_parent,
     payload, occurred_at)
SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9, nullif($10, ''),
       CASE WHEN $11::boolean THEN convert_from($6, 'UTF8')::jsonb END, $12
FROM (SELECT set_config('inlet.filter_version', coalesce(nullif($13::bigint, 0)::text, ''), true)) AS v;

-- name: InsertEvents :many
-- Several verified webhooks in one statement (group commit: one transaction,
-- one WAL flush). Arrays, one element per event, in the order of InsertEvent's
-- parameters ($5 headers as JSON text; $8 NULL for an unverified event; $10
-- '' for no trace; $11 store the parsed body as payload; $12 occurred_at;
-- $13 the version of filtered routing, as in InsertEvent). A duplicate
-- inserts nothing, as in InsertEvent; RETURNING names the keys stored (the
-- ingress role may read only those columns).
INSERT INTO webhook_ingress.events
    (provider, scheme, external_event_id, event_type, headers, raw_body, signature_verified, secret_index, request_uri, trace_parent,
     payload, occurred_at)
SELECT u.provider, u.scheme, u.external_event_id, u.event_type, u.headers::jsonb, u.raw_body, u.signature_verified,
       u.secret_index, u.request_uri, nullif(u.trace_parent, ''),
       CASE WHEN u.store_json THEN convert_from(u.raw_body, 'UTF8')::jsonb END, u.occurred_at
FROM ROWS FROM (unnest($1::text[]),
                unnest($2::text[]),
                unnest($3::text[]),
                unnest($4::text[]),
                unnest($5::text[]),
                unnest($6::bytea[]),
                unnest($7::boolean[]),
                unnest($8::smallint[]),
                unnest($9::text[]),
                unnest($10::text[]),
                unnest($11::boolean[]),
                unnest($12::timestamptz[]))
    AS u(provider, scheme, external_event_id, event_type, headers, raw_body, signature_verified, secret_index, request_uri, trace_parent,
         store_json, occurred_at)
CROSS JOIN (SELECT set_config('inlet.filter_version', coalesce(nullif($13::bigint, 0)::text, ''), true)) AS v
RETURNING provider, external_event_id;
