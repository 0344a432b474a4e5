-- 050_reporter_finite_times: the metadata reporter reads a time that is not
-- finite as the zero time.
--
-- webhook_worker may complete a job by hand (a consumer outside the SDK) and
-- write completed_at = 'infinity'; the reporter's read then failed on every
-- try from that cursor on (cannot subtract infinite timestamps, and pgx
-- cannot scan one), and no attempt after it was ever reported (review
-- helper-97: reporter TestAnInfiniteTimestampDoesNotStopReporting). Read
-- through finite_or_zero, such a row is a record with no times, which the
-- reporter skips and logs (by id) as it skips any invalid row.

CREATE FUNCTION webhook_ingress.finite_or_zero(t timestamptz) RETURNS timestamptz
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT CASE WHEN isfinite(t) THEN t ELSE '0001-01-01 00:00:00+00'::timestamptz END
$$;
COMMENT ON FUNCTION webhook_ingress.finite_or_zero(timestamptz) IS
    'The time, or the zero time (0001-01-01 UTC) when it is infinite: the reporter''s reads (050_reporter_finite_times).';
REVOKE ALL ON FUNCTION webhook_ingress.finite_or_zero(timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION webhook_ingress.finite_or_zero(timestamptz) TO webhook_streamer;
