package schema

import (
	"maps"
	"regexp"
	"strings"
	"testing"
	"testing/fstest"
)

func TestNameLine(t *testing.T) {
	t.Parallel()
	for line, want := range map[string]string{
		"-- name: InsertEvent :exec":   "InsertEvent",
		"-- name: InsertEvent":         "InsertEvent",
		"-- name: Claim2 :many  ":      "Claim2",
		"-- name: Claim\t:one":         "Claim",
		"-- name: Claim \t :one\r":     "Claim",
		"-- name: Claim :one extra":    "",
		"-- name: Claim :One":          "",
		"-- name: Claim one":           "",
		"-- name: Claim :":             "",
		"-- name: snake_case :one":     "",
		"-- name: ":                    "",
		"--name: Claim :one":           "",
		" -- name: Claim :one":         "",
		"SELECT 1 -- name: Claim :one": "",
	} {
		got, ok := nameLine(line)
		if got != want || ok != (want != "") {
			t.Errorf("nameLine(%q) = %q, %v; want %q", line, got, ok, want)
		}
	}
}

// regexpQueries is how loadQueries split a file before it scanned lines:
// the oracle the scan must agree with.
func regexpQueries(t *testing.T, files map[string]string) map[string]string {
	t.Helper()
	re := regexp.MustCompile(`(?m)^-- name: ([A-Za-z0-9]+)(?:[ \t]+:[a-z]+)?[ \t]*$`)
	out := map[string]string{}
	for _, text := range files {
		locs := re.FindAllStringSubmatchIndex(text, -1)
		for i, loc := range locs {
			end := len(text)
			if i+1 < len(locs) {
				end = locs[i+1][0]
			}
			out[text[loc[2]:loc[3]]] = strings.TrimSuffix(strings.TrimSpace(text[loc[1]:end]), ";")
		}
	}
	return out
}

func TestLoadQueriesAgreesWithTheRegexp(t *testing.T) {
	t.Parallel()
	embedded := map[string]string{}
	entries, err := queryFS.ReadDir("queries")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".sql") {
			b, err := queryFS.ReadFile("queries/" + e.Name())
			if err != nil {
				t.Fatal(err)
			}
			embedded[e.Name()] = string(b)
		}
	}
	if !maps.Equal(queries, regexpQueries(t, embedded)) || len(queries) < 50 {
		t.Fatalf("the embedded files split into %d queries, the regexp into %d, or differently", len(queries), len(regexpQueries(t, embedded)))
	}

	small := map[string]string{
		"queries/a.sql": "-- a file's comment\n\n-- name: One :one\nSELECT 1;\n\n-- name: Two :exec\n-- a comment inside Two\nUPDATE t\n   SET x = 1;\n",
		"queries/b.sql": "-- name: Three\nSELECT 3\n-- name: Four :many   \nSELECT 4;",
	}
	fsys := fstest.MapFS{}
	for name, text := range small {
		fsys[name] = &fstest.MapFile{Data: []byte(text)}
	}
	got, err := loadQueries(fsys)
	if err != nil {
		t.Fatal(err)
	}
	if want := regexpQueries(t, small); !maps.Equal(got, want) {
		t.Fatalf("loadQueries = %q, want %q", got, want)
	}
	if got["Two"] != "-- a comment inside Two\nUPDATE t\n   SET x = 1" {
		t.Fatalf("Two = %q", got["Two"])
	}

	for text, want := range map[string]string{
		"-- name: Empty :exec\n;\n-- name: Next :one\nSELECT 1;\n":         "query Empty in queries/c.sql is empty",
		"-- name: Twice :one\nSELECT 1;\n-- name: Twice :one\nSELECT 2;\n": "query Twice is defined twice (second in queries/c.sql)",
		"-- name: Last :one\n": "query Last in queries/c.sql is empty",
	} {
		_, err := loadQueries(fstest.MapFS{"queries/c.sql": &fstest.MapFile{Data: []byte(text)}})
		if err == nil || err.Error() != want {
			t.Errorf("loadQueries(%q): %v, want %q", text, err, want)
		}
	}
}
