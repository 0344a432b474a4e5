-- Queries of inlet roles: per-consumer database roles (011_consumer_roles).
-- They run as the owner of webhook_ingress, which alone may execute the
-- functions and write consumer_roles.

-- name: CreateConsumerRole :many
-- Make role $1 a consumer role running exactly handlers $2 (created NOLOGIN
-- when missing); one row per handler: added, kept or removed.
SELECT role_name, role_created, handler, change
FROM webhook_ingress.create_consumer_role($1, $2::text[]);

-- name: DropConsumerRole :many
-- Remove consumer role $1 and its handler rows; returns the handlers it ran.
SELECT handler FROM webhook_ingress.drop_consumer_role($1);

-- name: ReachesWorkerRole :one
-- Whether role $1 (a login role granted a consumer role) may also act as
-- webhook_worker, which runs every handler: it could SET ROLE to it.
SELECT pg_catalog.pg_has_role($1, 'webhook_worker', 'MEMBER');

-- name: ListConsumerRoles :many
-- Every consumer role (member of webhook_consumer): its handlers, and the
-- other roles that may act as it (members of it, e.g. login roles).
SELECT a.rolname::text,
       coalesce((SELECT array_agg(c.handler ORDER BY c.handler) FROM webhook_ingress.consumer_roles c
                 WHERE c.role_name = a.rolname), '{}'),
       coalesce((SELECT array_agg(u.rolname::text ORDER BY u.rolname) FROM pg_catalog.pg_auth_members m
                 JOIN pg_catalog.pg_roles u ON u.oid = m.member
                 WHERE m.roleid = a.oid), '{}')
FROM pg_catalog.pg_auth_members g
JOIN pg_catalog.pg_roles a ON a.oid = g.member
WHERE g.roleid = 'webhook_consumer'::regrole
  AND ($1 = '' OR a.rolname = $1)
ORDER BY a.rolname;
