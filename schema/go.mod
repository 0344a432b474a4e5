// Inlet's tables, roles, migrations and named queries: the contract between
// every service and the consumer SDK. A module of its own (pgx only) so that
// the SDK (module github.com/inlet-dev/inlet/consumers) uses it without
// requiring the Inlet server's module. Its tests use the repository's test
// harness and services through go.work at the repository root.
module github.com/inlet-dev/inlet/schema

go 1.26.8

require github.com/jackc/pgx/v5 v5.13.0

require (
	github.com/jackc/pgpassfile v1.0.0 // indirect
	github.com/jackc/pgservicefile v0.0.0-20240606120523-5a60cdf6a761 // indirect
	github.com/jackc/puddle/v2 v2.2.3 // indirect
	github.com/stretchr/testify v1.12.1 // indirect
	go.yaml.in/yaml/v3 v3.0.6 // indirect
	golang.org/x/sync v0.24.0 // indirect
	golang.org/x/text v0.43.0 // indirect
)
