package schema

// MigrateTo is migrateTo, for tests of one migration's data conversion.
var MigrateTo = migrateTo
