// Package streamer moves due jobs from Postgres onto the bus. It wakes on
// LISTEN/NOTIFY hints (and on a poll tick that always runs, covering a lost
// listener), claims due jobs in batches with one UPDATE … FOR UPDATE SKIP
// LOCKED statement that also takes their lease, and publishes a reference
// (bus.Ref) per job to its handler's topic. Any number of streamers cooperate:
// SKIP LOCKED keeps them off each other's rows. Its reaper returns expired
// leases to pending, or to dead_letter when the last attempt expired.
//
// The streamer's role (webhook_streamer) cannot read raw_body or headers;
// nothing it publishes could carry them.
package streamer
