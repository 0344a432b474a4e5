// Package config loads Inlet's one YAML configuration file: `${ENV}` expansion
// (for secrets) in every value, `DATABASE_URL` for Postgres, strict field
// checking, defaults, and validation errors that name the bad field.
package config
