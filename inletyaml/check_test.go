package inletyaml

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/inlet-dev/inlet/internal/config"
)

// problems parses doc as service does and returns its problems' lines.
func problems(t *testing.T, doc string, lookup func(string) (string, bool), service config.Service) []string {
	t.Helper()
	_, err := ParseFor([]byte(doc), lookup, service)
	if err == nil {
		return nil
	}
	if _, ok := errors.AsType[*config.Problems](err); !ok {
		t.Fatalf("error %v (%T) is not *config.Problems", err, err)
	}
	return strings.Split(err.Error(), "\n")
}

// A problem is on its own line of the file: blank lines and comments before
// it count (the file used to be re-encoded first, which dropped them, so
// this was reported as line 2).
func TestProblemIsOnItsLineOfTheFile(t *testing.T) {
	t.Parallel()
	doc := "# streamer settings\nstreamer:\n\n  poll_interval: 1sec\n"
	got := problems(t, doc, env(nil), config.AllSections)
	want := `line 4: streamer.poll_interval: "1sec" is not a duration (write it like 500ms, 10s, 5m or 1h)`
	if len(got) != 1 || got[0] != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}

// An unknown key is named by its key path, with the known key at its level
// it is likely a typo of, or the keys known there.
func TestUnknownKeySuggestsTheKnownOne(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ doc, want string }{
		{"sourcs: []\n", "line 1: sourcs: unknown key; did you mean `sources`?"},
		{"streamer:\n  pol_interval: 1s\n", "line 2: streamer.pol_interval: unknown key; did you mean `poll_interval`?"},
		{"streamer:\n  PollInterval: 1s\n", "line 2: streamer.PollInterval: unknown key; did you mean `poll_interval`?"},
		{"consumer:\n  handlers:\n    - {name: a, type: log, concurency: 2}\n", "line 3: consumer.handlers[0].concurency: unknown key; did you mean `concurrency`?"},
		{"log:\n  colour: red\n", "line 2: log.colour: unknown key (known here: format, level)"},
	} {
		if got := problems(t, c.doc, env(nil), config.AllSections); len(got) != 1 || got[0] != c.want {
			t.Errorf("%q: got %q, want %q", c.doc, got, c.want)
		}
	}
}

// Every problem of a file is listed, in line order, not only the first:
// unknown keys, wrong types, values out of range in several sections.
func TestEveryProblemIsListed(t *testing.T) {
	t.Parallel()
	doc := `log:
  level: loud
streamer:
  wake: smoke
  batch_size: lots
sourcs: []
consumer:
  handlers:
    - {name: a, type: carrier-pigeon}
`
	got := problems(t, doc, env(nil), config.AllSections)
	want := []string{
		`line 2: log.level: "loud" is not one of debug, info, warn, error`,
		`line 4: streamer.wake: "smoke" is not notify, replication or poll`,
		`line 5: streamer.batch_size: "lots" is not a whole number`,
		"line 6: sourcs: unknown key; did you mean `sources`?",
		`line 9: consumer.handlers[0].type: "carrier-pigeon" is not log or http-forward`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// Every problem of a file read by Load names the file, the scheme's own
// checks of a source included (a secret's format: it was found only when
// ingress started, and reported without the file).
func TestLoadNamesTheFileInEveryProblem(t *testing.T) {
	t.Parallel()
	p := filepath.Join(t.TempDir(), "inlet.yaml")
	doc := "sources:\n  - name: acme\n    type: standard-webhooks\n    secrets: [\"whsec_!!!notbase64\"]\nstreamer:\n  wake: smoke\n"
	if err := os.WriteFile(p, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Load(p)
	if err == nil {
		t.Fatal("loaded")
	}
	lines := strings.Split(err.Error(), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], p+":4: sources[0].secrets[0]: not valid base64") ||
		lines[1] != p+`:6: streamer.wake: "smoke" is not notify, replication or poll` || strings.Contains(err.Error(), "notbase64") {
		t.Fatalf("got %q", lines)
	}
}

// Every service checks every section, so a file one command accepts no other
// rejects: a bad streamer: section stops inlet ingress too (it used to start).
// Only what names a variable the process is not given, in a section it does
// not read, goes unchecked there; and it holds only its own sections.
func TestEveryServiceChecksEverySection(t *testing.T) {
	t.Parallel()
	services := map[string]config.Service{"all": config.AllSections, "ingress": config.IngressService,
		"streamer": config.StreamerService, "consumer": config.ConsumerService, "relay": config.RelayService,
		"control-plane": config.ControlPlaneService, "none": config.NoSection}
	bad := "streamer:\n  batch_size: 0\n  max_leased_per_handler: 1\n"
	for name, svc := range services {
		got := problems(t, bad, env(nil), svc)
		if want := "line 3: streamer.max_leased_per_handler: 1 must be at least streamer.batch_size (100)"; len(got) != 1 || got[0] != want {
			t.Errorf("%s: got %q, want %q", name, got, want)
		}
	}

	// The webhook secret is set only where ingress runs.
	doc := "sources:\n  - {name: gh, type: github, secrets: [\"${GH_SECRET}\"]}\nstreamer:\n  wake: poll\n"
	ingressEnv := env(map[string]string{"GH_SECRET": "s3cret"})
	c, err := ParseFor([]byte(doc), ingressEnv, config.IngressService)
	if err != nil || c.Sources[0].Secrets[0] != "s3cret" {
		t.Fatalf("ingress: %+v, %v", c.Sources, err)
	}
	// The streamer holds the sources' names alone (its silence detector
	// watches the configured sources), even when its environment has the
	// secret.
	for _, e := range []func(string) (string, bool){env(nil), ingressEnv} {
		c, err = ParseFor([]byte(doc), e, config.StreamerService)
		if err != nil || len(c.Sources) != 1 || c.Sources[0].Name != "gh" || c.Sources[0].Secrets != nil || c.Sources[0].Type != "" || c.Streamer.Wake != "poll" {
			t.Fatalf("streamer: %+v, %v", c, err)
		}
	}
	if got := problems(t, doc, env(nil), config.IngressService); len(got) != 1 || !strings.HasPrefix(got[0], "line 2: sources[0].secrets[0]: environment variable GH_SECRET is not set") {
		t.Fatalf("ingress without its secret: %q", got)
	}
	// What does not depend on the missing secret is still checked there.
	badSource := "sources:\n  - {name: gh, type: gihtub, secrets: [\"${GH_SECRET}\"]}\n"
	for name, svc := range services {
		if got := problems(t, badSource, env(nil), svc); len(got) == 0 || !strings.Contains(strings.Join(got, "\n"), `line 2: sources[0].type: "gihtub" is not one of`) {
			t.Errorf("%s: got %q", name, got)
		}
	}
}
