// Package controlplane is inlet control-plane: a small multi-tenant receiver
// of the reporters' attempt records (package reporter) with a database of its
// own (schema control_plane, migrated at start from embedded SQL; behind a
// long transaction on its tables, such as a backup's, the migration waits
// at most 3 s at a time, so the page and reports are not held up behind it,
// and gives up after 2 minutes: [MigrateWith]).
//
// Each tenant is one data plane with its own token. POST /api/v1/reports
// stores a batch idempotently on (tenant, attempt id) after checking every
// record strictly: unknown fields, values outside the fixed lists or
// patterns, and oversize batches are refused with 400 and a reason; a
// stored batch is answered with how many records it had and how many were
// new, the tenant's cursor as it was before it (cursor_before), and the
// tenant's highest arrival number held before and after it (arrival_before,
// arrival: records are numbered per tenant in the order their reports
// commit, control-plane migration 002), by which a reporter notices records
// this database lost (restored from a backup), also those stored under ids
// below the cursor, and sends them again. GET /api/v1/cursor answers the
// highest attempt id held for the tenant, where its reporter resumes, and
// its highest arrival number held. GET / is the tenant's
// page (HTTP Basic: the tenant's name and its token as password): jobs by
// their latest outcome, failure classes and duration percentiles,
// server-rendered, no script. A token
// selects exactly one tenant, and every query is by that tenant, so one
// tenant never sees another's data.
//
// It never receives a body, a header or a database credential of a data
// plane: a record has no field that could carry one.
package controlplane
