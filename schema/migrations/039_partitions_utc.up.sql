-- 039_partitions_utc: partition bounds on UTC boundaries whatever the
-- session's time zone.
--
-- create_partitions adds its step ('1 day', '1 week', '1 month') to
-- date_trunc(…, 'UTC'), and PostgreSQL does timestamptz arithmetic in the
-- session's TimeZone, which defaults to the server's (initdb takes the
-- host's). West of UTC a month step from the 1st 00:00 UTC landed on the
-- 30th or 31st; across a DST change a week was 167 hours; the next period
-- then truncated back to the same start, got an empty range, and CREATE
-- TABLE failed: inlet retention failed before dropping anything, on every
-- run, and new events piled up in the default partition (a review proved
-- it: retention TestMonthlyPartitionsInANonUTCSessionTimeZone and TestWeeklyPartitionsAcrossDSTInANonUTCSessionTimeZone). partitions()
-- reads bounds back from their printed text, which DateStyle shapes.
--
-- Each function now runs with TimeZone UTC and DateStyle ISO, whatever the
-- caller's session says. Functions only: nothing is locked or rewritten.
ALTER FUNCTION webhook_ingress.create_partitions(text, integer, timestamptz) SET TimeZone = 'UTC' SET DateStyle = 'ISO, MDY';
ALTER FUNCTION webhook_ingress.partitions() SET TimeZone = 'UTC' SET DateStyle = 'ISO, MDY';
ALTER FUNCTION webhook_ingress.partition_status(timestamptz) SET TimeZone = 'UTC' SET DateStyle = 'ISO, MDY';
ALTER FUNCTION webhook_ingress.drop_partition(timestamptz) SET TimeZone = 'UTC' SET DateStyle = 'ISO, MDY';
