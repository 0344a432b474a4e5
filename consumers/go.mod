// The consumer SDK: what a team imports to run handlers. It requires pgx,
// watermill, NATS (package bus/natsbus only), the OpenTelemetry API and the
// small Inlet modules it shares with the server, never the server's module
// (github.com/inlet-dev/inlet): tests/sdk_test.go holds it to that. Its tests
// use the repository's PostgreSQL and NATS harness (internal/pgtest,
// internal/natstest) through go.work at the repository root.
module github.com/inlet-dev/inlet/consumers

go 1.26.8

require (
	github.com/ThreeDotsLabs/watermill v1.4.7
	github.com/ThreeDotsLabs/watermill-nats/v2 v2.1.3
	github.com/inlet-dev/inlet/internal/database v0.0.0-00010101000000-000000000000
	github.com/inlet-dev/inlet/internal/groupcommit v0.0.0-00010101000000-000000000000
	github.com/inlet-dev/inlet/schema v0.0.0-00010101000000-000000000000
	github.com/jackc/pgx/v5 v5.13.0
	github.com/nats-io/nats.go v1.56.0
	go.opentelemetry.io/otel v1.47.0
	go.opentelemetry.io/otel/trace v1.47.0
	golang.org/x/time v0.16.0
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/jackc/pgpassfile v1.0.0 // indirect
	github.com/jackc/pgservicefile v0.0.0-20240606120523-5a60cdf6a761 // indirect
	github.com/jackc/puddle/v2 v2.2.3 // indirect
	github.com/klauspost/compress v1.20.4 // indirect
	github.com/lithammer/shortuuid/v3 v3.0.7 // indirect
	github.com/nats-io/nkeys v0.4.17 // indirect
	github.com/nats-io/nuid v1.0.1 // indirect
	github.com/oklog/ulid v1.3.1 // indirect
	github.com/pkg/errors v0.9.1 // indirect
	github.com/stretchr/testify v1.12.1 // indirect
	go.yaml.in/yaml/v3 v3.0.6 // indirect
	golang.org/x/crypto v0.58.0 // indirect
	golang.org/x/sync v0.24.0 // indirect
	golang.org/x/sys v0.50.0 // indirect
	golang.org/x/text v0.43.0 // indirect
)

replace (
	github.com/inlet-dev/inlet/internal/database => ../internal/database
	github.com/inlet-dev/inlet/internal/groupcommit => ../internal/groupcommit
	github.com/inlet-dev/inlet/schema => ../schema
)
