-- 015_lz4_toast: compress what TOAST compresses in events with lz4 instead of
-- pglz, where the server has lz4 (PostgreSQL 14+ built --with-lz4, as
-- Debian's and the official images are). With store_json on, a typical
-- provider event (1-3 KB of JSON) makes a row over the ~2 KB TOAST threshold,
-- and compressing its payload (and raw_body) with pglz is a measurable part
-- of ingest's cost (bench payload section); lz4 compresses several times
-- faster. Decompression gives back the same bytes: raw_body stays the record,
-- byte for byte, whatever compressed it. Values already stored keep the
-- method they were written with; both are read.
--
-- Catalog only: nothing is rewritten. The parent's setting is inherited by
-- partitions created later; each existing partition is set too (PostgreSQL 15
-- does not recurse SET COMPRESSION to partitions). On a server without lz4
-- nothing changes and a notice says why.

SET LOCAL lock_timeout = '10s';

DO $$
DECLARE
    part regclass;
BEGIN
    BEGIN
        ALTER TABLE webhook_ingress.events
            ALTER COLUMN payload SET COMPRESSION lz4,
            ALTER COLUMN raw_body SET COMPRESSION lz4;
    EXCEPTION WHEN feature_not_supported THEN
        RAISE NOTICE 'events keep pglz compression: %', SQLERRM;
        RETURN;
    END;
    FOR part IN SELECT inhrelid::regclass FROM pg_inherits
                WHERE inhparent = 'webhook_ingress.events'::regclass LOOP
        EXECUTE format('ALTER TABLE %s ALTER COLUMN payload SET COMPRESSION lz4, ALTER COLUMN raw_body SET COMPRESSION lz4', part);
    END LOOP;
END
$$;
