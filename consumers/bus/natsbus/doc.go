// Package natsbus is the NATS JetStream transport between `inlet streamer`
// and consumer services in other processes (bus.kind: nats): one stream,
// INLET_JOBS, with a durable consumer per handler whose replicas share its
// job references. A consumer program subscribes with [New]; the streamer
// publishes on the same value. It is a package of its own so that the
// consumers package does not pull NATS into programs that use another
// transport.
package natsbus
