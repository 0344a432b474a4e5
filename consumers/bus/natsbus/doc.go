// Package natsbus is the NATS JetStream transport between `inlet streamer`
// and consumer services in other processes (bus.kind: nats): one stream,
// INLET_JOBS, with a durable consumer per handler whose replicas share its
// job references. A consumer program subscribes with [New]; the streamer
// publishes on the same value. It is a package of its own so that the
// consumers package does not pull NATS into programs that use another
// transport.
//
// A subscription keeps consuming across what NATS does to its durable: a
// durable (or the stream) lost to a restart with memory storage or deleted by
// an operator is recreated, and a durable that the library stopped consuming
// although it exists (recreated by another replica first, or a pull the
// server refused) is consumed again. Until then [NATS.Healthy] reports the
// subscription and [NATS.Stalled] lists its topic (a consumer service
// leaves its handler out of its liveness, while [NATS.ConnectionHealthy],
// the connection being down, leaves out all of them); lease expiry
// republishes the references lost with a durable.
// A process without stream settings of its own (Config with no Storage or
// Replicas: an SDK consumer) makes a lost stream again with the settings of
// the one it last found, so a memory stream comes back a memory stream.
//
// A message is never sent over the server's max_payload (1 MiB by default,
// often lowered by operators), headers included: a message of several job
// references (bus.NewBatchMessage, the streamer's refs_per_message) that is
// over it is split into batch messages that fit, each with the original's
// metadata (trace context) and an id of its own. One reference over it alone
// fails the publish, naming its job and size, and nothing of that publish is
// sent: no try can deliver it over this server.
//
// A subscription that stops (its context done, or Close) nacks what it had
// not handed out, and waits up to two seconds for its receiver's decision on
// what it had: a reference whose attempt already started is acknowledged,
// not handed to another replica to run again.
package natsbus
