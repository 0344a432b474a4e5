package config

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// testFile stands in for the file's struct of sections, which lives where
// the services are composed (inletyaml).
type testFile struct {
	Name    string   `yaml:"name"`
	Sources []string `yaml:"sources"`
	Plane   struct {
		Listen string `yaml:"listen"`
	} `yaml:"control_plane"`
}

func (f testFile) WithDefaults() testFile {
	if f.Name == "" {
		f.Name = "default"
	}
	return f
}

func (f testFile) Validate() error {
	if f.Name == "bad" {
		return errors.New("name: bad")
	}
	return nil
}

func env(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

// Parse expands, decodes strictly, then defaults and validates, and drops
// the sections the service does not read before expanding.
func TestParseHandsSectionsOver(t *testing.T) {
	t.Parallel()
	f, err := Parse[testFile]([]byte("sources: [\"${A}\", \"${B:-b}\"]\n"), env(map[string]string{"A": "a"}), AllSections)
	if err != nil || f.Name != "default" || strings.Join(f.Sources, ",") != "a,b" {
		t.Fatalf("got %+v, %v", f, err)
	}
	for _, c := range []struct{ doc, want string }{
		{"name: bad\n", "name: bad"},
		{"nmae: x\n", "line 1: nmae: unknown key; did you mean `name`?"},
		{"sources: [\"${UNSET}\"]\n", "line 1: sources[0]: environment variable UNSET is not set"},
		// Set to "": said so, not "not set".
		{"sources: [\"${EMPTY}\"]\n", "line 1: sources[0]: environment variable EMPTY is set but empty"},
	} {
		if _, err := Parse[testFile]([]byte(c.doc), env(map[string]string{"EMPTY": ""}), AllSections); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: error %v, want %q", c.doc, err, c.want)
		}
	}
	// The control plane does not read sources:, so their variables need not be set.
	f, err = Parse[testFile]([]byte("sources: [\"${UNSET}\"]\ncontrol_plane: {listen: x}\n"), env(nil), ControlPlaneService)
	if err != nil || len(f.Sources) != 0 || f.Plane.Listen != "x" {
		t.Fatalf("control plane: %+v, %v", f, err)
	}
}

func TestLoadNamesTheFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if _, err := Load[testFile](filepath.Join(dir, "missing.yaml"), AllSections); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing file: %v", err)
	}
	p := filepath.Join(dir, "inlet.yaml")
	if err := os.WriteFile(p, []byte("name: bad\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load[testFile](p, AllSections); err == nil || !strings.Contains(err.Error(), p+":1: name: bad") {
		t.Fatalf("invalid file: %v", err)
	}
}

type renamedFile struct {
	New string `yaml:"new"`
}

func (f renamedFile) WithDefaults() renamedFile    { return f }
func (renamedFile) Validate() error                { return nil }
func (renamedFile) RenamedKeys() map[string]string { return map[string]string{"old": "new"} }

// An old key is read as the new one, with a warning once per process; both
// together are an error naming both lines.
func TestRenamedKeys(t *testing.T) {
	var warnings []string
	defer func(w func(string, string, int)) { warnRenamed = w }(warnRenamed)
	warnRenamed = func(old, key string, line int) { warnings = append(warnings, old+"→"+key) }
	f, err := Parse[renamedFile]([]byte("old: x\n"), env(nil), AllSections)
	if err != nil || f.New != "x" || strings.Join(warnings, ",") != "old→new" {
		t.Fatalf("got %+v, %v, warnings %q", f, err, warnings)
	}
	if _, err := Parse[renamedFile]([]byte("new: x\nold: y\n"), env(nil), AllSections); err == nil || !strings.Contains(err.Error(), "line 2: old: the old name of new (line 1): keep only new") {
		t.Fatalf("both keys: %v", err)
	}
}

func TestRenamedKeyWarnsOnce(t *testing.T) {
	var buf strings.Builder
	defer func(l *slog.Logger) { slog.SetDefault(l) }(slog.Default())
	slog.SetDefault(slog.New(slog.NewTextHandler(&buf, nil)))
	warned.Delete("old")
	for range 3 {
		if _, err := Parse[renamedFile]([]byte("old: x\n"), env(nil), AllSections); err != nil {
			t.Fatal(err)
		}
	}
	if n := strings.Count(buf.String(), "config key renamed"); n != 1 || !strings.Contains(buf.String(), "old=old new=new line=1") {
		t.Fatalf("%d warnings: %s", n, buf.String())
	}
}

// A typo is within a couple of edits of the key it means; a word that is
// no key's typo gets no suggestion.
func TestSuggest(t *testing.T) {
	t.Parallel()
	known := []string{"consumer", "poll_interval", "sources", "streamer"}
	for key, want := range map[string]string{"sourcs": "sources", "soruces": "sources", "stremer": "streamer",
		"pollinterval": "poll_interval", "Sources": "sources", "zzz": "", "ab": ""} {
		got, ok := suggest(key, known)
		if ok != (want != "") || got != want && ok {
			t.Errorf("suggest(%q) = %q, %v; want %q", key, got, ok, want)
		}
	}
}

// Problems print as FILE:LINE: key.path: message, in line order, those
// without a line last.
func TestProblemsFormat(t *testing.T) {
	t.Parallel()
	ps := &Problems{File: "inlet.yaml"}
	ps.add(0, "admin.token", "required")
	ps.add(7, "streamer.wake", `"smoke" is not notify`)
	ps.add(2, "", "did not find expected key")
	ps.sort()
	want := "inlet.yaml:2: did not find expected key\ninlet.yaml:7: streamer.wake: \"smoke\" is not notify\ninlet.yaml: admin.token: required"
	if ps.Error() != want {
		t.Fatalf("got\n%s\nwant\n%s", ps.Error(), want)
	}
}

// NoSection reads nothing: every variable may be unset, and the value
// returned holds no section.
func TestNoSection(t *testing.T) {
	t.Parallel()
	f, err := Parse[testFile]([]byte("name: x\nsources: [\"${UNSET}\"]\n"), env(nil), NoSection)
	if err != nil || f.Name != "default" || len(f.Sources) != 0 {
		t.Fatalf("got %+v, %v", f, err)
	}
	if _, err := Parse[testFile]([]byte("name: bad\n"), env(nil), NoSection); err == nil || err.Error() != "line 1: name: bad" {
		t.Fatalf("a bad value is still a problem: %v", err)
	}
}
