-- 066_route_workers_and_live_roles: a consumer role may not rewrite another
-- role's liveness rows (review helper-172).
--
-- 064's update policy checked only the new row (db_role NULL or the caller's
-- own), so role B could set db_role to NULL on role A's rows of a handler
-- both run, unrouting it until A's next liveness write. Now a role updates
-- only rows that say no role or its own. (With 066 the consumers of
-- unrestricted roles, webhook_worker, say '' — no policy holds them — and a
-- handler with consumers of a scoped role and of webhook_worker is routed
-- too: ListJobRoutes.) Idempotent, as the migrations since 060.

DROP POLICY IF EXISTS consumer_own_db_role_update ON webhook_ingress.consumers;
CREATE POLICY consumer_own_db_role_update ON webhook_ingress.consumers AS RESTRICTIVE FOR UPDATE TO webhook_consumer
    USING (db_role IS NULL OR db_role = current_user) WITH CHECK (db_role IS NULL OR db_role = current_user);
