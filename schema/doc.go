// Package schema owns Inlet's PostgreSQL schema: the versioned migrations that
// create webhook_ingress (events, jobs, subscriptions, job_attempts, the view
// attempts, the roles and their grants), the migrator that applies them, and the named queries the
// services run. Everything is embedded in the binary, so `inlet migrate` and
// `inlet dev` need nothing beside it.
package schema
