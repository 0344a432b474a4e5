-- 004_operator_subscriptions: operators may switch a subscription off (or on
-- again). A consumer only disables its own handlers' stale patterns, so a
-- handler removed from every consumer would keep getting jobs otherwise.
-- Patterns and handler names stay the consumers' to declare.

GRANT UPDATE (enabled, updated_at) ON webhook_ingress.subscriptions TO webhook_operator;
