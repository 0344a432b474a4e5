-- 042_order_keys_rehashed: one entity, one lane, across the upgrade to 034.
--
-- 034 gave a key over 512 bytes the form 'sha256:' || hex digest, but left
-- the jobs already stored with their keys whole. Before 034 only a key over
-- the lanes' btree entry limit (~2.7 kB) was refused; one of 513 to ~2,600
-- bytes was stored as is. So an entity with such a key had its jobs from
-- before the upgrade in one lane and those after it in another: while its
-- job from before ran, the claim leased its later job beside it, and a
-- dead letter from before no longer held the later ones back.
--
-- Every such job (a completed one too: a replay puts it back in its lane
-- under the key it holds) and the lane rows get the key 034's order_key_of
-- gives. The scan is one pass over jobs; it updates only those rows (few or
-- none), taking no lock beyond theirs.

UPDATE webhook_ingress.jobs
SET order_key = 'sha256:' || encode(sha256(textsend(order_key)), 'hex')
WHERE order_key IS NOT NULL AND octet_length(order_key) > 512;

UPDATE webhook_ingress.order_lanes
SET order_key = 'sha256:' || encode(sha256(textsend(order_key)), 'hex')
WHERE octet_length(order_key) > 512;
