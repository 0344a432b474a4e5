-- 034_order_key_bounded: an event whose entity key is long is stored.
--
-- order_key_of returned the value its spec names whole, and an ordered
-- handler's job writes it to order_lanes, whose index order_lanes_lane holds
-- at most about 2.7 kB per entry. An event whose key value was longer (a
-- long id, or a spec naming an object, such as data.object) failed its
-- insert with "index row size exceeds btree maximum" (SQLSTATE 54000), and
-- ingress answered 400 event_unstorable: a provider does not retry a 4xx,
-- so the signed event was lost for every handler, unordered ones included.
--
-- Now a value over 512 bytes is replaced by 'sha256:' and the hex digest of
-- its bytes: one value still names one key, so its events keep their order,
-- and the entry stays small. A value of at most 512 bytes is unchanged, so
-- the jobs created before and after this migration agree on their keys.
CREATE OR REPLACE FUNCTION webhook_ingress.order_key_of(spec text, payload jsonb, headers jsonb) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE AS
$$
    SELECT CASE WHEN octet_length(k.v) > 512 THEN 'sha256:' || encode(sha256(textsend(k.v)), 'hex') ELSE k.v END
    FROM (SELECT CASE
        WHEN spec IS NULL THEN NULL
        WHEN spec LIKE 'header:%' THEN headers -> substr(spec, 8) ->> 0
        ELSE payload #>> string_to_array(spec, '.')
    END AS v) k
$$;
COMMENT ON FUNCTION webhook_ingress.order_key_of(text, jsonb, jsonb) IS
    'The entity key an order_key spec names in an event (a payload path, or header:Name); a value over 512 bytes as sha256:<hex> of it, so it fits the lanes'' index (034_order_key_bounded).';
