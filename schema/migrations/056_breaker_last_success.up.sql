-- 056_breaker_last_success: a circuit breaker's consecutive failures are
-- those recorded since the handler's newest success, whatever order the
-- successes are reported in.
--
-- 055's HandlerSucceeded counted the failures recorded since the success it
-- was given. A success reported late (a transactional handler's, whose time
-- is its transaction's start; or another replica's) counted again failures
-- a newer success had already forgiven, so one failure after that reopened
-- the circuit (review helper-123: TestBreakerOlderSuccessDoesNotUndoANewer).
-- last_success_at keeps the newest success's time: a reset counts from the
-- later of it and its own success, and a failure whose recording began
-- before it (an older failure reported late) is not counted.
ALTER TABLE webhook_ingress.handler_limits ADD COLUMN last_success_at timestamptz;
COMMENT ON COLUMN webhook_ingress.handler_limits.last_success_at IS
    'The newest success of a handler with a breaker that moved its failure count (its completion''s transaction start): consecutive_failures counts the failures recorded since. Written by consumers (HandlerSucceeded).';
GRANT UPDATE (last_success_at) ON webhook_ingress.handler_limits TO webhook_worker, webhook_consumer;
