// Package streamer moves due jobs from Postgres onto the bus. It wakes on a
// wake source (LISTEN/NOTIFY hints, or logical replication of the jobs table)
// and on a poll tick that always runs, covering a lost wake-up; it claims due
// jobs in batches with one UPDATE … FOR UPDATE SKIP LOCKED statement that also
// takes their lease, and publishes a reference (bus.Ref) per job to its
// handler's topic. Any number of streamers cooperate: SKIP LOCKED keeps them
// off each other's rows. Its reaper returns expired leases to pending, or to
// dead_letter when the last attempt expired.
//
// The streamer's role (webhook_streamer) cannot read raw_body or headers;
// nothing it publishes could carry them.
//
// # Choosing a wake source (streamer.wake)
//
// Every source is only a hint: what a wake-up misses, the poll tick (and the
// claim each start runs) finds, so the choice is about latency and cost,
// never about data.
//
// notify (the default, Config.ListenConnect): writers send a debounced
// NOTIFY outside their transaction and streamers LISTEN. Cheap and simple;
// it needs writers that hint (ingress does; a hand-written INSERT does not)
// and a plain, unpooled connection per streamer. A NOTIFY in a transaction
// takes a cluster-wide lock during commit, serialising committing
// transactions that notified; with many writers hinting under heavy
// concurrent writes that queue is what replication avoids.
//
// replication (Config.ReplicationConnect, see Replication): each streamer
// follows logical replication (pgoutput) of webhook_ingress.jobs through
// publication inlet_jobs and wakes on every commit that inserted a job or
// made one pending again, whoever wrote it, with no NOTIFY at all. It costs:
//
//   - wal_level = logical (a server restart; somewhat more WAL), and
//     max_replication_slots / max_wal_senders with room for every replica.
//   - A role with the REPLICATION attribute for the replication connection,
//     which must reach Postgres directly (not through a transaction pooler).
//     REPLICATION is powerful: where pg_hba.conf lets it, such a role can
//     also stream the whole cluster physically, raw bodies included, and the
//     stream carries whole jobs rows (last_error too) whatever its grants;
//     it sits outside webhook_streamer's column-level least privilege. Give
//     it only to the streamer's replication connection.
//   - The publication, created by the owner of webhook_ingress.jobs (the
//     streamer does it when its role may; otherwise Start fails naming the
//     statement: CREATE PUBLICATION inlet_jobs FOR TABLE webhook_ingress.jobs
//     WITH (publish = 'insert, update')). An insert-only publication works
//     too: jobs made pending again are then found by the poll tick.
//   - One slot per replica: a slot has one reader and keeps its position
//     across restarts, so each replica sets its own stable SlotName (default
//     inlet_streamer). A second reader of a slot gets "slot is active" and
//     polls while it retries.
//   - Retained WAL: a slot keeps all WAL from its confirmed position on, so
//     an abandoned slot (a replica retired or renamed) retains WAL until the
//     disk is full. Drop it: SELECT pg_drop_replication_slot('inlet_streamer');
//     watch pg_replication_slots (active, confirmed_flush_lsn), and consider
//     max_slot_wal_keep_size as a cap.
//   - Decoding on the primary: each replica's walsender decodes all WAL and
//     ships every published change of jobs (claims and outcomes included,
//     with publish 'update'), so the cost grows with replicas × job churn.
//   - Failover: before PostgreSQL 17 a logical slot does not move to a
//     promoted standby; the streamer creates it afresh there, and the claim
//     each (re)connection runs covers the gap.
//
// poll (neither): the tick alone, every PollInterval.
package streamer
