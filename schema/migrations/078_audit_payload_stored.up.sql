-- 078_audit_payload_stored: the audit seals whether an event's payload was
-- stored (review helper-305).
--
-- payload (012), the parsed copy of raw_body that auditors' JSON-path
-- queries read (inlet events list --where), is checked against raw_body by
-- inlet audit verify (051), but a NULL payload was not checked at all: the
-- owner, with the append-only trigger off, could set a sealed event's
-- payload to NULL and the event dropped out of every --where answer while
-- verify said intact (audit TestVerifyNoticesANulledPayload). No leaf said
-- whether a payload had been stored, so verify could not tell a payload
-- removed from one never kept (store_json off, an oversized or non-JSON
-- body, rows before 012).
--
-- The sealer now writes event leaves in format v3 (audit/hash.go, the
-- package audit doc): v2's fields and one byte, whether payload was stored
-- when the event was sealed. A payload sealed as stored that is NULL now is
-- an altered event; one sealed as NULL and filled since (inlet backfill
-- stored, the one UPDATE events_guard allows, only from NULL and only with
-- the parsed raw_body) is counted and listed, not a problem. Verify still
-- accepts v1 and v2 leaves (the tags tell the formats apart), so no
-- checkpoint sealed before changes.
--
-- The sealer, webhook_sealer, may still read neither raw_body nor payload
-- (003, 012): it reads the events to seal through audit_events_to_seal, which
-- runs as its owner and returns the columns the sealer was already granted
-- (003, 075), the headers as their digest, and payload only as
-- payload IS NOT NULL, which reads the row's null bitmap, not the value
-- (nothing is detoasted). It is STABLE, so it reads in the snapshot of the
-- statement that calls it: the sealer's gap rule (package audit, "Sealing
-- without serializing ingress") needs the events read after its probe.
--
-- Safe on a large live log: a function is created and granted; no table is
-- altered, read or rewritten (creating it takes ACCESS SHARE on events for
-- an instant, to check its body, under inlet migrate's lock_timeout). It
-- runs twice safely (CREATE OR REPLACE keeps its grants; revoking, granting
-- and commenting again change nothing). Until it has run, a sealer of this
-- version fails each pass naming the migration and seals nothing (the first
-- pass after inlet migrate seals it all); a sealer of the previous version
-- keeps sealing v2 leaves, which verify accepts (their payload stays
-- unproven). A verify of the previous version reports every v3 leaf as
-- altered: upgrade verifiers with sealers.

CREATE OR REPLACE FUNCTION webhook_ingress.audit_events_to_seal(p_first_id bigint, p_batch_size bigint)
    RETURNS TABLE (id bigint, provider text, external_event_id text, event_type text, received_at timestamptz,
                   body_sha256 bytea, headers_sha256 bytea, scheme text, request_uri text, signature_verified boolean,
                   secret_index smallint, occurred_at timestamptz, payload_stored boolean)
    LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS
$$
    SELECT e.id, e.provider, e.external_event_id, e.event_type, e.received_at, e.body_sha256,
           sha256(convert_to(e.headers::text, 'UTF8')),
           e.scheme, e.request_uri, e.signature_verified, coalesce(e.secret_index, -1)::smallint,
           e.occurred_at, e.payload IS NOT NULL
    FROM webhook_ingress.events e
    WHERE e.id >= p_first_id
    ORDER BY e.id
    LIMIT p_batch_size
$$;
COMMENT ON FUNCTION webhook_ingress.audit_events_to_seal(bigint, bigint) IS
    'What the audit sealer seals of the next p_batch_size events from id p_first_id, in id order: the columns webhook_sealer may read, the headers as SHA-256 of headers::text, and whether payload is stored (never payload itself): leaf format v3 (078_audit_payload_stored). Runs as the owner; executable by webhook_sealer only.';
REVOKE ALL ON FUNCTION webhook_ingress.audit_events_to_seal(bigint, bigint) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION webhook_ingress.audit_events_to_seal(bigint, bigint) TO webhook_sealer;
