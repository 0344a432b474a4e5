package inletyaml

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/inlet-dev/inlet/internal/config"
)

const examplePath = "../inlet.example.yaml"

// optionLine is a commented-out key of inlet.example.yaml, an option to
// uncomment ("# admin:", "#   listen: ...", "    # relay_tolerance: 5m"),
// as opposed to prose.
var optionLine = regexp.MustCompile(`^(\s*)# ((?:\s*- )?\s*[a-z_]+:(?:\s|$).*)$`)

// exampleKeyPaths is every key path of inlet.example.yaml, its options to
// uncomment included, a list's elements as [].
func exampleKeyPaths(t *testing.T) map[string]int {
	t.Helper()
	b, err := os.ReadFile(examplePath)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(b), "\n")
	for i, l := range lines {
		if m := optionLine.FindStringSubmatch(l); m != nil {
			lines[i] = m[1] + m[2]
		}
	}
	var root yaml.Node
	if err := yaml.Unmarshal([]byte(strings.Join(lines, "\n")), &root); err != nil {
		t.Fatalf("inlet.example.yaml with its options uncommented: %v", err)
	}
	paths := map[string]int{}
	var walk func(n *yaml.Node, path string)
	walk = func(n *yaml.Node, path string) {
		switch n.Kind {
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				p := n.Content[i].Value
				if path != "" {
					p = path + "." + p
				}
				paths[p] = n.Content[i].Line
				walk(n.Content[i+1], p)
			}
		case yaml.SequenceNode:
			for _, e := range n.Content {
				walk(e, path+"[]")
			}
		case yaml.DocumentNode:
			walk(n.Content[0], path)
		}
	}
	walk(&root, "")
	return paths
}

// inlet.example.yaml documents every key: each one the config structs know
// is in it (set, or commented out as an option), and it has no key they do
// not know, so it cannot fall behind them again.
func TestExampleHasEveryKey(t *testing.T) {
	t.Parallel()
	have := exampleKeyPaths(t)
	known := config.KeyPaths[Config]()
	for _, k := range known {
		if _, ok := have[k]; !ok {
			t.Errorf("inlet.example.yaml lacks %s", k)
		}
	}
	for k, line := range have {
		// A map's keys (silence.max_silence.stripe) are the operator's own.
		if !slices.Contains(known, k) && !slices.ContainsFunc(known, func(m string) bool { return strings.HasPrefix(k, m+".") && m == "silence.max_silence" }) {
			t.Errorf("inlet.example.yaml:%d: %s is no key of the config", line, k)
		}
	}
}

// inlet.example.yaml passes the checks every service makes, as it is and
// with only the variables it needs set.
func TestExampleValidates(t *testing.T) {
	for _, k := range []string{"DATABASE_URL", "STRIPE_WEBHOOK_SECRET", "GITHUB_WEBHOOK_SECRET"} {
		t.Setenv(k, "x-"+k)
	}
	t.Setenv("ACME_WEBHOOK_SECRET", "whsec_aW5sZXQtZXhhbXBsZS1rZXktMDEyMzQ1Njc4OQ==")
	for _, svc := range []config.Service{config.AllSections, config.IngressService, config.StreamerService,
		config.ConsumerService, config.RelayService, config.ControlPlaneService, config.NoSection} {
		if _, err := config.Load[Config](examplePath, svc); err != nil {
			t.Errorf("service %d: %v", svc, err)
		}
	}
}
