-- 055_read_grants: the auditor and the operator read every table of record.
--
-- docs/database.md: webhook_auditor SELECTs everything and writes nothing;
-- webhook_operator reads everything. Three tables were missed as they came:
-- 054's retention_keys_due (dropped periods whose dedupe keys wait to be
-- deleted: a redelivery of one of their events is answered duplicate until
-- then) was readable by neither (review helper-121:
-- TestAuditorAndOperatorReadRetentionKeysDue), 040's filter_version by
-- neither, and 045's source_alerts not by the auditor. TestPrivilegeMatrix
-- now lists every table of the schema from the catalog, so a table added
-- without its grants fails it.

GRANT SELECT ON webhook_ingress.retention_keys_due TO webhook_auditor, webhook_operator;
GRANT SELECT ON webhook_ingress.filter_version TO webhook_auditor, webhook_operator;
GRANT SELECT ON webhook_ingress.source_alerts TO webhook_auditor;
