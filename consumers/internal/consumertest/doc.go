// Package consumertest is the consumer packages' test harness: a fresh
// migrated database per test (via pgtest) with a superuser pool and a
// webhook_worker pool, an in-process bus, and a minimal streamer that claims
// due jobs with the shared ClaimJobs query, reaps expired leases, and
// publishes job references, standing in for the real streamer in unit tests.
// It imports testing and is for tests only.
package consumertest
