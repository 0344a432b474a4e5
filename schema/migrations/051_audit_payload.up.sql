-- 051_audit_payload: inlet audit verify checks the parsed copy of the body.
--
-- payload (012) is not sealed: it is derived from raw_body, which is, and
-- the events guard (012) lets a writer store only
-- convert_from(raw_body, 'UTF8')::jsonb there. But the owner, with the
-- triggers off, could rewrite it: auditors' JSON-path queries (inlet events
-- list --where) then read the forged value while verify said intact (review
-- helper-96: audit TestVerifyNoticesARewrittenPayload). Verify now reads
-- each payload against its body through jsonb_of, which parses a body as
-- the guard does and is NULL for one that is not UTF-8 JSON (a payload
-- beside such a body is altered). A NULL payload is not checked: it is what
-- store_json off, an oversized body and rows before 012 have.

CREATE FUNCTION webhook_ingress.jsonb_of(body bytea) RETURNS jsonb
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
AS $$
BEGIN
    RETURN convert_from(body, 'UTF8')::jsonb;
EXCEPTION WHEN OTHERS THEN
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION webhook_ingress.jsonb_of(bytea) IS
    'A body parsed as the events guard parses it into payload (012), or NULL when it is not UTF-8 JSON: what audit verify checks payload against (051_audit_payload).';
REVOKE ALL ON FUNCTION webhook_ingress.jsonb_of(bytea) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION webhook_ingress.jsonb_of(bytea) TO webhook_operator, webhook_auditor;
