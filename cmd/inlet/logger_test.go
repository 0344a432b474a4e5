package main

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/inletyaml"
)

// JSON logs print durations as text a person reads ("7.668695ms"), as the
// text format does, not as integer nanoseconds; nested in groups too.
func TestJSONLogDurationsAreText(t *testing.T) {
	for _, format := range []string{"json", "text"} {
		var buf bytes.Buffer
		log := newLogger(&buf, inletyaml.Log{Format: format}, "json")
		log.Info("claimed", slog.Duration("took", 7668695*time.Nanosecond), slog.Group("lease", slog.Duration("ttl", 30*time.Second)))
		out := buf.String()
		want := map[string][]string{
			"json": {`"took":"7.668695ms"`, `"ttl":"30s"`},
			"text": {`took=7.668695ms`, `lease.ttl=30s`},
		}[format]
		for _, w := range want {
			if !strings.Contains(out, w) {
				t.Errorf("%s log lacks %s: %s", format, w, out)
			}
		}
	}
}
