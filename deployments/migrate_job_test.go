package deployments

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	k8syaml "sigs.k8s.io/yaml"
)

// migrate-job.yaml and deployments/README.md document applying the migrate
// Job through kustomize, selected by its component label: the kustomized
// Job carries that label and the image kustomization.yaml sets, so the
// documented first step and upgrade step run the real image, and the
// apply -k right after finds the Job unchanged. (Found by a review: the docs
// said `kubectl apply -f migrate-job.yaml`, which runs image "inlet", which
// no registry serves, and apply -k then failed changing the Job's
// immutable pod template.)
func TestMigrateJobIsAppliedThroughKustomize(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(kubeDir, "migrate-job.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	const documented = "kubectl kustomize . | kubectl apply -f - -l app.kubernetes.io/component=migrate"
	if !strings.Contains(string(raw), documented) || regexp.MustCompile(`(?m)^#\s+kubectl apply -f migrate-job\.yaml`).Match(raw) {
		t.Errorf("migrate-job.yaml does not document %q (or still documents applying it on its own)", documented)
	}
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(readme), "apply `migrate-job.yaml`") || !strings.Contains(string(readme), "app.kubernetes.io/component=migrate") {
		t.Errorf("deployments/README.md does not document applying the migrate Job through kustomize")
	}
	var standalone batchv1.Job
	if err := k8syaml.Unmarshal(raw, &standalone); err != nil {
		t.Fatal(err)
	}
	var built *batchv1.Job
	selected := 0
	for _, doc := range splitDocuments(t, "kustomize build", kustomizeBuild(t)) {
		var meta struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Name   string            `json:"name"`
				Labels map[string]string `json:"labels"`
			} `json:"metadata"`
		}
		if err := k8syaml.Unmarshal(doc, &meta); err != nil {
			t.Fatal(err)
		}
		if meta.Metadata.Labels["app.kubernetes.io/component"] == "migrate" {
			selected++
		}
		if meta.Kind == "Job" && meta.Metadata.Name == standalone.Name {
			var j batchv1.Job
			if err := k8syaml.Unmarshal(doc, &j); err != nil {
				t.Fatal(err)
			}
			built = &j
		}
	}
	if built == nil {
		t.Fatal("the kustomize build has no migrate Job")
	}
	if built.Labels["app.kubernetes.io/component"] != "migrate" || selected != 1 {
		t.Errorf("the label selects %d resources of the build (want the migrate Job alone); the Job's labels %v", selected, built.Labels)
	}
	if img := built.Spec.Template.Spec.Containers[0].Image; img == standalone.Spec.Template.Spec.Containers[0].Image {
		t.Errorf("the kustomized migrate Job runs image %q, the placeholder of migrate-job.yaml: kustomization.yaml sets no image for it", img)
	}
}
