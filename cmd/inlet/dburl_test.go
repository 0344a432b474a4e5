package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// A database URL's password never appears in a CLI error message. libpq's
// key=value syntax (which pgx accepts) allows spaces around '=':
// "password = s3cret". pgx's ParseConfigError redacts only "password=..."
// written without spaces, and inlet migrate wrapped pgx.Connect's error
// as-is, so the password reached stderr (a review proved it); every command
// now connects through connectURL.
func TestMigrateErrorNeverQuotesThePassword(t *testing.T) {
	const pw = "canary-db-password"
	t.Chdir(t.TempDir())
	for _, dbURL := range []string{
		"host=127.0.0.1 user=inlet password = " + pw + " dbname=inlet sslmode=bogus",
		"host=127.0.0.1 user=inlet password =" + pw + " dbname=inlet sslmode=bogus",
	} {
		t.Setenv("DATABASE_URL", "")
		var out, errOut bytes.Buffer
		env := &environment{stdout: &out, stderr: &errOut}
		err := run(context.Background(), env, []string{"migrate", "--database-url", dbURL})
		if err == nil {
			t.Fatalf("migrate with an invalid sslmode succeeded")
		}
		code := exitCode(env, err)
		printed := errOut.String() + out.String()
		if strings.Contains(printed, pw) {
			t.Errorf("inlet migrate (exit %d) printed the database password:\n%s", code, printed)
		}
		if !strings.Contains(printed, "not a valid PostgreSQL connection string") {
			t.Errorf("inlet migrate (exit %d) does not say the URL is invalid:\n%s", code, printed)
		}
	}
}
