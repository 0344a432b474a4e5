package schema

import (
	"embed"
	"fmt"
	"io/fs"
	"regexp"
	"strings"
)

//go:embed queries/*.sql
var queryFS embed.FS

// queries holds every named query: a `-- name: X :kind` line (sqlc's
// format, see sqlc.yaml) starts query X, which runs until the next name line;
// the statement's closing semicolon, which sqlc needs, is left out.
var queries = mustLoadQueries()

var nameLine = regexp.MustCompile(`(?m)^-- name: ([A-Za-z0-9]+)(?:[ \t]+:[a-z]+)?[ \t]*$`)

func mustLoadQueries() map[string]string {
	q, err := loadQueries(queryFS)
	if err != nil {
		panic(err)
	}
	return q
}

func loadQueries(fsys fs.FS) (map[string]string, error) {
	out := map[string]string{}
	files, err := fs.Glob(fsys, "queries/*.sql")
	if err != nil {
		return nil, err
	}
	for _, f := range files {
		b, err := fs.ReadFile(fsys, f)
		if err != nil {
			return nil, err
		}
		text := string(b)
		locs := nameLine.FindAllStringSubmatchIndex(text, -1)
		for i, loc := range locs {
			name := text[loc[2]:loc[3]]
			end := len(text)
			if i+1 < len(locs) {
				end = locs[i+1][0]
			}
			body := strings.TrimSuffix(strings.TrimSpace(text[loc[1]:end]), ";")
			if body == "" {
				return nil, fmt.Errorf("query %s in %s is empty", name, f)
			}
			if _, dup := out[name]; dup {
				return nil, fmt.Errorf("query %s is defined twice (second in %s)", name, f)
			}
			out[name] = body
		}
	}
	return out, nil
}

// Query returns the named query's SQL. It panics on an unknown name: names are
// compile-time constants and the schema tests load every one.
func Query(name string) string {
	q, ok := queries[name]
	if !ok {
		panic(fmt.Sprintf("schema: no query named %q", name))
	}
	return q
}
