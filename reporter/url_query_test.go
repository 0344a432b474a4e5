package reporter_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inlet-dev/inlet/reporter"
)

// TestAURLWithAQueryOrFragmentIsRefused: reporter.url is a base URL that
// the reporter appends /api/v1/cursor and /api/v1/reports to, so one with a
// query or a fragment is refused when the configuration is checked, naming
// the key and never echoing the URL (a query is where a secret would go).
// Before the fix (noticed by review helper-208) both were accepted, the
// paths landed in the query or fragment, every request went to the control
// plane's page, and the reporter logged a 401 that pointed at the token.
func TestAURLWithAQueryOrFragmentIsRefused(t *testing.T) {
	t.Parallel()
	pool, err := pgxpool.New(context.Background(), "postgres://nobody@127.0.0.1:1/none") // never connected: New reads no row
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	const token, key = "0123456789abcdef-token", "0123456789abcdef-key"
	for _, c := range []struct {
		url string
		ok  bool
	}{
		{"https://cp.example.com", true},
		{"https://cp.example.com/inlet/", true}, // a path prefix (behind a proxy) is fine
		{"https://cp.example.com/?auth=s3cr3t-in-query", false},
		{"https://cp.example.com?", false},
		{"https://cp.example.com/#s3cr3t-in-fragment", false},
		{"https://cp.example.com#", false},
	} {
		err := reporter.Section{URL: c.url, Token: token, Key: key}.WithDefaults().Validate()
		_, newErr := reporter.New(reporter.Config{Pool: pool, URL: c.url, Token: token, Key: []byte(key)})
		if c.ok {
			if err != nil || newErr != nil {
				t.Errorf("%s: Validate %v, New %v; want both accepted", c.url, err, newErr)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), "reporter.url") || !strings.Contains(err.Error(), "query or fragment") {
			t.Errorf("%s: Validate %v, want an error naming reporter.url and the query or fragment", c.url, err)
		}
		if newErr == nil || !strings.Contains(newErr.Error(), "query or fragment") {
			t.Errorf("%s: New %v, want an error naming the query or fragment", c.url, newErr)
		}
		for _, e := range []error{err, newErr} {
			if e != nil && strings.Contains(e.Error(), "s3cr3t") {
				t.Errorf("%s: the error echoes the URL: %v", c.url, e)
			}
		}
	}
}
