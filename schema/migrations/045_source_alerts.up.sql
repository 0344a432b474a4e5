-- 045_source_alerts: what the silent-source detector last reported, per
-- source, kept in the database instead of each streamer's memory.
--
-- The detector (monitor, in inlet streamer) judged each source every check
-- and reported a change against an in-memory map that every replica kept
-- for itself and that started empty. So an alert the endpoint refused once
-- was never sent again (the map had moved on); a restart alerted a source
-- that was still silent a second time, and never said "resumed" for one
-- that recovered while it was down; and a follower moved its map on without
-- reporting, so a change the leader had not reported before it stopped was
-- lost. Now the replica that reports compares each source's judgement with
-- the row here and moves the row only once the alert was taken (or when no
-- alert URL is set): a refused alert is sent again at the next check, by
-- whichever replica leads then. No row: not reported silent.
CREATE TABLE webhook_ingress.source_alerts (
    source      text        PRIMARY KEY,
    silent      boolean     NOT NULL,
    reported_at timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE webhook_ingress.source_alerts IS
    'The silence the detector last reported per source (045): it reports a source whose judgement differs from its row, and moves the row once the alert was taken.';
GRANT SELECT, INSERT, UPDATE ON webhook_ingress.source_alerts TO webhook_streamer;
GRANT SELECT ON webhook_ingress.source_alerts TO webhook_operator;
