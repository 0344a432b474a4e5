// Inlet's PostgreSQL pools, each assuming a service's role. A module of its
// own so that the consumer SDK (module github.com/inlet-dev/inlet/consumers)
// uses it without requiring the Inlet server's module. Its tests use the
// repository's test harness through go.work at the repository root.
module github.com/inlet-dev/inlet/internal/database

go 1.26.8

require (
	github.com/inlet-dev/inlet/schema v0.0.0-00010101000000-000000000000
	github.com/jackc/pgx/v5 v5.13.0
)

require (
	github.com/jackc/pgpassfile v1.0.0 // indirect
	github.com/jackc/pgservicefile v0.0.0-20240606120523-5a60cdf6a761 // indirect
	github.com/jackc/puddle/v2 v2.2.3 // indirect
	golang.org/x/sync v0.24.0 // indirect
	golang.org/x/text v0.43.0 // indirect
)

replace github.com/inlet-dev/inlet/schema => ../../schema
