package controlplane

import (
	_ "embed"
	"fmt"
	"regexp"
	"strings"
)

//go:embed queries.sql
var queriesSQL string

var queries = mustParseQueries(queriesSQL)

var queryName = regexp.MustCompile(`(?m)^-- name: ([A-Za-z0-9]+)\s*$`)

// mustParseQueries splits text into its `-- name: X` blocks.
func mustParseQueries(text string) map[string]string {
	out := map[string]string{}
	locs := queryName.FindAllStringSubmatchIndex(text, -1)
	for i, loc := range locs {
		end := len(text)
		if i+1 < len(locs) {
			end = locs[i+1][0]
		}
		out[text[loc[2]:loc[3]]] = strings.TrimSpace(text[loc[1]:end])
	}
	return out
}

func query(name string) string {
	q, ok := queries[name]
	if !ok {
		panic(fmt.Sprintf("controlplane: no query named %q", name))
	}
	return q
}
