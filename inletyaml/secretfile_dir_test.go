package inletyaml

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A relative ${file:PATH} is the config file's: Load resolves it against
// the file's directory, whatever the working directory, and a missing one's
// error names the absolute path it was resolved to; Parse (bytes, no file:
// the embedded defaults) resolves it against the working directory as
// before; an absolute PATH is itself (review helper-242, fixed by
// helper-247).
func TestRelativeSecretFileIsTheConfigFilesOwn(t *testing.T) {
	top, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	project, elsewhere := filepath.Join(top, "project"), filepath.Join(top, "elsewhere")
	for _, d := range []string{filepath.Join(project, "secrets"), filepath.Join(elsewhere, "secrets")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for dir, secret := range map[string]string{project: "whsec_the_projects", elsewhere: "whsec_the_working_directorys"} {
		if err := os.WriteFile(filepath.Join(dir, "secrets", "stripe"), []byte(secret+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	abs := filepath.Join(top, "absolute")
	if err := os.WriteFile(abs, []byte("whsec_absolute\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	yaml := "sources:\n  - name: stripe\n    type: stripe\n    secrets: [\"${file:secrets/stripe}\", \"${file:" + abs + "}\"]\n"
	file := filepath.Join(project, "inlet.yaml")
	if err := os.WriteFile(file, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Chdir(elsewhere)
	for _, path := range []string{file, filepath.Join("..", "project", "inlet.yaml")} {
		c, err := Load(path)
		if err != nil {
			t.Fatalf("Load(%s) from %s: %v", path, elsewhere, err)
		}
		if s := c.Sources[0].Secrets; len(s) != 2 || s[0] != "whsec_the_projects" || s[1] != "whsec_absolute" {
			t.Errorf("Load(%s) from %s: secrets %q; want the project's secrets/stripe and the absolute file", path, elsewhere, s)
		}
	}
	c, err := Parse([]byte(yaml), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	if s := c.Sources[0].Secrets; len(s) != 2 || s[0] != "whsec_the_working_directorys" {
		t.Errorf("Parse from %s: secrets %q; want the working directory's secrets/stripe", elsewhere, s)
	}

	if err := os.Remove(filepath.Join(project, "secrets", "stripe")); err != nil {
		t.Fatal(err)
	}
	_, err = Load(file)
	want := "secret file secrets/stripe (" + filepath.Join(project, "secrets", "stripe") + "): no such file or directory"
	if err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "whsec") {
		t.Errorf("Load with the secret file missing: %v; want %q and no secret", err, want)
	}
}
