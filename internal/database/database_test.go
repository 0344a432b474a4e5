package database

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

func TestIsUnavailable(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{context.DeadlineExceeded, true},
		{fmt.Errorf("insert: %w", &pgconn.PgError{Code: "57P01"}), true}, // admin shutdown
		{&pgconn.PgError{Code: "08006"}, true},                           // connection failure
		{&pgconn.PgError{Code: "53300"}, true},                           // too many connections
		{&pgconn.PgError{Code: "57014"}, true},                           // query_canceled: its context ended, or statement_timeout
		{&pgconn.PgError{Code: "23505"}, false},                          // unique violation: the statement's fault
		{&pgconn.PgError{Code: "42501"}, false},                          // permission denied
		{errors.New("something else"), false},
	} {
		if got := IsUnavailable(c.err); got != c.want {
			t.Errorf("IsUnavailable(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

// A bad URL is refused without quoting it: it may hold a password.
func TestOpenDoesNotEchoTheURL(t *testing.T) {
	_, err := Open(context.Background(), "postgres://u:hunter2@host:notaport/db", Options{})
	if err == nil || strings.Contains(err.Error(), "hunter2") {
		t.Fatalf("error %v", err)
	}
	if _, err := Open(context.Background(), "", Options{}); err == nil || !strings.Contains(err.Error(), "DATABASE_URL") {
		t.Fatalf("empty URL: %v", err)
	}
}
