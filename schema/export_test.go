package schema

// MigrateTo is migrateTo, for tests of one migration's data conversion.
var MigrateTo = migrateTo

// LoadQueries is loadQueries, for tests that run older versions' queries.
var LoadQueries = loadQueries
