-- Queries of inlet roles: per-consumer database roles (011_consumer_roles).
-- They run as the owner of webhook_ingress, which alone may execute the
-- functions and write consumer_roles.

-- name: CreateConsumerRole :many
-- Make `role` a consumer role running exactly `handlers` (created NOLOGIN
-- when missing), inside the scopes (scope_providers[i], scope_types[i]),
-- which replace its old ones (both NULL: kept; 038_consumer_role_scopes);
-- one row per handler: added, kept or removed, and per scope ('source:type'
-- in handler): scope_added, scope_kept or scope_removed.
SELECT role_name::text AS role_name, role_created::boolean AS role_created, handler::text AS handler, change::text AS change
FROM webhook_ingress.create_consumer_role(sqlc.arg(role)::text, sqlc.arg(handlers)::text[],
                                          sqlc.narg(scope_providers)::text[], sqlc.narg(scope_types)::text[]);

-- name: DropConsumerRole :many
-- Remove consumer `role` and its handler rows; returns the handlers it ran.
SELECT handler::text AS handler FROM webhook_ingress.drop_consumer_role(sqlc.arg(role)::text);

-- name: ReachesWorkerRole :one
-- Whether `role` (a login role granted a consumer role) may also act as
-- webhook_worker, which runs every handler: it could SET ROLE to it.
SELECT pg_catalog.pg_has_role(sqlc.arg(role)::name, 'webhook_worker', 'MEMBER') AS reaches_worker;

-- name: ListConsumerRoles :many
-- Every consumer role (member of webhook_consumer): its handlers, its
-- scopes ('source:type'), and the other roles that may act as it (members
-- of it, e.g. login roles).
SELECT a.rolname::text AS role,
       coalesce((SELECT array_agg(c.handler ORDER BY c.handler) FROM webhook_ingress.consumer_roles c
                 WHERE c.role_name = a.rolname), '{}')::text[] AS handlers,
       coalesce((SELECT array_agg(c.provider_pattern || ':' || c.event_type_pattern
                                  ORDER BY c.provider_pattern, c.event_type_pattern)
                 FROM webhook_ingress.consumer_role_scopes c
                 WHERE c.role_name = a.rolname), '{}')::text[] AS scopes,
       coalesce((SELECT array_agg(u.rolname::text ORDER BY u.rolname) FROM pg_catalog.pg_auth_members m
                 JOIN pg_catalog.pg_roles u ON u.oid = m.member
                 WHERE m.roleid = a.oid), '{}')::text[] AS members
FROM pg_catalog.pg_auth_members g
JOIN pg_catalog.pg_roles a ON a.oid = g.member
WHERE g.roleid = 'webhook_consumer'::regrole
  AND (sqlc.arg(role)::text = '' OR a.rolname = sqlc.arg(role)::text)
ORDER BY a.rolname;
