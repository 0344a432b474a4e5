-- 021_generic_fk_checks: the foreign-key check of every job a fan-out writes
-- runs a generic plan instead of being planned again for each job.
--
-- Each job inserted is checked against events (jobs_event_fkey) by a query
-- on (id, received_at) that PostgreSQL prepares once per session. Under the
-- default plan_cache_mode it is planned afresh for every row: events is
-- partitioned, so the generic plan (every partition, pruned at run time)
-- looks dearer than a custom one plus its planning. Measured on
-- PostgreSQL 15 with 6 partitions: 0.17 ms per job planned each time
-- against 0.035 ms with the generic plan. Worse, a custom plan may read
-- idx_events_received_at and filter on id: every event of one group-commit
-- transaction has the same received_at (its start), so each check walked the
-- whole batch (9.5 ms per job for 20,000 events inserted by one statement).
-- The generic plan reads the primary key and prunes to one partition.
--
-- plan_cache_mode is set on the two functions that fan events out to jobs,
-- so it holds for the statements they run and the checks those fire, and
-- nowhere else. A later CREATE OR REPLACE of either function must repeat the
-- SET clause (schema TestFanOutChecksRunGenericPlans fails otherwise).
--
-- Catalog only: no lock on any table, nothing rewritten.

ALTER FUNCTION webhook_ingress.events_fan_out()
    SET plan_cache_mode = force_generic_plan;
ALTER FUNCTION webhook_ingress.fan_out_filtered(text[], text[], bigint[])
    SET plan_cache_mode = force_generic_plan;
