package schema

// MigrateTo is migrateTo, for tests of one migration's data conversion.
var MigrateTo = migrateTo

// LoadQueries is loadQueries, for tests that run older versions' queries.
var LoadQueries = loadQueries

// Apply is apply: one migration, retried when it is a deadlock's victim.
var Apply = apply

// IndexBuildLockKey is the advisory lock BuildIndexes takes.
const IndexBuildLockKey = indexBuildLockKey
