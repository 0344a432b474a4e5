package verify

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

var updateProviderTables = flag.Bool("update", false, "rewrite the provider tables of docs/providers.md and README.md from ProviderDocs")

const (
	providersDoc = "../../docs/providers.md"
	readme       = "../../README.md"
	// readmeMax keeps the README a README; the reference is in docs/.
	readmeMax = 12 << 10
)

// Every row of the provider table says everything a reader needs, and its
// source entry is one a user can paste: it decodes into a Config with no
// unknown key, names its own type, and, with test secrets in place of its
// ${VARS}, validates.
func TestProviderDocsComplete(t *testing.T) {
	t.Parallel()
	docs := ProviderDocs()
	if len(docs) != len(schemeTypes())+len(Presets()) {
		t.Fatalf("%d rows for %d schemes and %d presets", len(docs), len(schemeTypes()), len(Presets()))
	}
	for _, d := range docs {
		for field, v := range map[string]string{"Provider": d.Provider, "Headers": d.Headers, "Signed": d.Signed,
			"ID": d.ID, "Type": d.PresetDoc.Type, "Occurred": d.Occurred, "Source": d.Source, "Docs": d.Docs} {
			if strings.TrimSpace(v) == "" {
				t.Errorf("%s: PresetDoc.%s is empty", d.Type, field)
			}
		}
		if (d.Handshake == "") != (len(d.Kinds) == 0) {
			t.Errorf("%s: handshake %q, kinds %v: describe each handshake answered, and only those", d.Type, d.Handshake, d.Kinds)
		}
		if !strings.HasPrefix(d.Docs, "https://") {
			t.Errorf("%s: Docs %q is no https URL", d.Type, d.Docs)
		}
		var cfg Config
		dec := yaml.NewDecoder(strings.NewReader(d.Source))
		dec.KnownFields(true)
		if err := dec.Decode(&cfg); err != nil {
			t.Errorf("%s: Source does not decode as a source entry: %v\n%s", d.Type, err, d.Source)
			continue
		}
		if cfg.Type != d.Type {
			t.Errorf("%s: Source has type %q", d.Type, cfg.Type)
		}
		test := signTestConfig(d.Type)
		cfg.Secrets = test.Secrets
		if cfg.VerifyToken != "" {
			cfg.VerifyToken = test.VerifyToken
		}
		if _, err := New(cfg); err != nil {
			t.Errorf("%s: Source with test secrets: %v", d.Type, err)
		}
	}
}

// cell is s for a Markdown table cell.
func cell(s string) string {
	return strings.NewReplacer("|", `\|`, "\n", " ").Replace(strings.TrimSpace(s))
}

// providerTable is the full table of docs/providers.md.
func providerTable(docs []ProviderDoc) string {
	var b strings.Builder
	b.WriteString("| provider | `type` | headers | signed string | event id | event type | `occurred_at` | handshake |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|\n")
	for _, d := range docs {
		fmt.Fprintf(&b, "| [%s](%s) | `%s` | %s | %s | %s | %s | %s | %s |\n", cell(d.Provider), d.Docs, d.Type,
			cell(d.Headers), cell(d.Signed), cell(d.ID), cell(d.PresetDoc.Type), cell(d.Occurred), cell(cmpOr(d.Handshake, "—")))
	}
	return b.String()
}

// providerSources is the copy-ready source of every provider.
func providerSources(docs []ProviderDoc) string {
	var b strings.Builder
	b.WriteString("```yaml\nsources:\n")
	for _, d := range docs {
		fmt.Fprintf(&b, "  # %s: %s\n  - name: %s\n    %s\n", d.Provider, d.Docs, d.Type,
			strings.ReplaceAll(strings.TrimSpace(d.Source), "\n", "\n    "))
	}
	b.WriteString("```\n")
	return b.String()
}

// providerList is the README's compact table.
func providerList(docs []ProviderDoc) string {
	var b strings.Builder
	b.WriteString("| provider | `type` | handshake answered |\n|---|---|---|\n")
	for _, d := range docs {
		hs := "—"
		if len(d.Kinds) > 0 {
			hs = "`" + strings.Join(d.Kinds, "`, `") + "`"
		}
		fmt.Fprintf(&b, "| %s | `%s` | %s |\n", cell(d.Provider), d.Type, hs)
	}
	return b.String()
}

// generated replaces what stands between the begin and end markers of name
// in doc with content, and reports whether the markers were found.
func generated(doc []byte, name, content string) ([]byte, bool) {
	re := regexp.MustCompile(`(?s)(<!-- ` + name + `:begin[^>]*-->\n).*?(<!-- ` + name + `:end -->)`)
	if !re.Match(doc) {
		return doc, false
	}
	return re.ReplaceAllFunc(doc, func(m []byte) []byte {
		sub := re.FindSubmatch(m)
		return append(append(append([]byte{}, sub[1]...), content...), sub[2]...)
	}), true
}

// The provider tables of docs/providers.md and the README are generated
// from ProviderDocs: this test fails when they are stale, and with -update
// rewrites them (go test ./ingress/verify -run TestProviderTables -update).
func TestProviderTables(t *testing.T) {
	docs := ProviderDocs()
	for _, f := range []struct {
		path  string
		parts map[string]string
	}{
		{providersDoc, map[string]string{"provider-table": providerTable(docs), "provider-sources": providerSources(docs)}},
		{readme, map[string]string{"provider-list": providerList(docs)}},
	} {
		old, err := os.ReadFile(f.path)
		if err != nil {
			t.Fatal(err)
		}
		doc := old
		for name, content := range f.parts {
			var ok bool
			if doc, ok = generated(doc, name, content); !ok {
				t.Fatalf("%s lacks the markers <!-- %s:begin --> and <!-- %s:end -->", f.path, name, name)
			}
		}
		switch {
		case bytes.Equal(doc, old):
		case *updateProviderTables:
			if err := os.WriteFile(f.path, doc, 0o644); err != nil {
				t.Fatal(err)
			}
		default:
			t.Errorf("%s: the provider table is stale; run go test ./ingress/verify -run TestProviderTables -update", f.path)
		}
		if f.path == readme && len(doc) > readmeMax {
			t.Errorf("README.md is %d bytes, more than %d: keep the reference in docs/", len(doc), readmeMax)
		}
	}
}
