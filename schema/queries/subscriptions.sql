-- name: UpsertSubscription :execrows
-- Register (or refresh) one (handler, provider pattern, event type pattern)
-- with its content filter $5 (a CEL expression, NULL for none) and its
-- order key $6 (NULL: unordered) and policy $7 (block or skip).
INSERT INTO webhook_ingress.subscriptions (handler, provider_pattern, event_type_pattern, max_attempts, filter, order_key, order_policy, enabled, updated_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, true, now())
ON CONFLICT (handler, provider_pattern, event_type_pattern)
DO UPDATE SET max_attempts = excluded.max_attempts, filter = excluded.filter, order_key = excluded.order_key,
              order_policy = excluded.order_policy, enabled = true, updated_at = now()
WHERE subscriptions.max_attempts IS DISTINCT FROM excluded.max_attempts
   OR subscriptions.filter IS DISTINCT FROM excluded.filter
   OR subscriptions.order_key IS DISTINCT FROM excluded.order_key
   OR subscriptions.order_policy IS DISTINCT FROM excluded.order_policy
   OR NOT subscriptions.enabled;

-- name: DisableOtherSubscriptions :execrows
-- A handler's patterns changed: switch off its rows not in the new set
-- ($2, $3: parallel arrays of provider and event type patterns). A
-- consumer role switches off only rows inside its own scopes (038, 046),
-- and no registrant a row inside a scope of another scoped role given the
-- handler (067): a handler shared by two roles keeps the other's rows,
-- webhook_worker's registration included.
UPDATE webhook_ingress.subscriptions s
SET enabled = false, updated_at = now()
WHERE s.handler = $1
  AND s.enabled
  AND (s.provider_pattern, s.event_type_pattern) NOT IN (
      SELECT p, t FROM ROWS FROM (unnest($2::text[]), unnest($3::text[])) AS u(p, t))
  AND webhook_ingress.in_registrant_scope(current_user::text, s.provider_pattern, s.event_type_pattern)
  AND NOT webhook_ingress.another_role_may_own(current_user::text, s.handler, s.provider_pattern, s.event_type_pattern);
