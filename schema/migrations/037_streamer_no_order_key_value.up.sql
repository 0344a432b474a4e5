-- 037_streamer_no_order_key_value: the streamer's role reads no entity key.
--
-- An ordered handler's job carries its entity key, the value its order_key
-- names in the event's payload or headers (data.object.customer,
-- header:X-Shop-Id): a copy of body or header content, in jobs.order_key and
-- order_lanes.order_key. webhook_streamer, which may read neither raw_body
-- nor headers, could read both copies (schema
-- TestStreamerReadsNoOrderKeyValue). Only the claims need them, and since
-- 036 they run as their owner; nothing else the streamer or the reporter
-- runs reads them.
--
-- Rolling upgrade: streamers of the previous version read neither column
-- outside the claims either.
REVOKE SELECT (order_key) ON webhook_ingress.jobs FROM webhook_streamer;
REVOKE SELECT ON webhook_ingress.order_lanes FROM webhook_streamer;
