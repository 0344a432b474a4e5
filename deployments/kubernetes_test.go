package deployments

// The Kubernetes manifests, three ways:
//
//  1. kubeconform (a Go tool of this module: go tool kubeconform) validates
//     every manifest, and the kustomize build of them all, against JSON
//     schemas of the Kubernetes API in strict mode (unknown fields fail).
//     kubeconform downloads its schemas at run time by default, which CI
//     cannot; so the test writes them itself, offline, from the Kubernetes
//     OpenAPI document that sigs.k8s.io/kustomize/kyaml embeds (v1.21.2),
//     converted the way kubeconform's own openapi2jsonschema does for its
//     "-standalone-strict" schemas.
//  2. Strict decoding into the typed k8s.io/api structs of a current release
//     (sigs.k8s.io/yaml.UnmarshalStrict: unknown or duplicate fields fail),
//     which also covers fields newer than the schemas' release.
//  3. What no schema knows: probes on ports the container has and the config
//     listens on, the security context, resources, the ConfigMap key and
//     Secret keys referenced exist, the command line is one inlet accepts,
//     the ConfigMap's inlet.yaml loads with Inlet's own loader given the
//     container's environment, grace periods outlast the drain deadlines, and
//     the kustomization lists every file.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/kustomize/api/krusty"
	kustypes "sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/kustomize/kyaml/openapi"
	k8syaml "sigs.k8s.io/yaml"

	"github.com/inlet-dev/inlet/inletyaml"
	"github.com/inlet-dev/inlet/internal/config"
)

const kubeDir = "kubernetes"

// manifest is one Kubernetes object of one file.
type manifest struct {
	file       string
	apiVersion string
	kind       string
	name       string
	raw        []byte // the document, as YAML
}

// splitDocuments splits a YAML stream into its non-empty documents.
func splitDocuments(t *testing.T, file string, b []byte) [][]byte {
	t.Helper()
	dec := yaml.NewDecoder(bytes.NewReader(b))
	var docs [][]byte
	for {
		var n yaml.Node
		err := dec.Decode(&n)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		if len(n.Content) == 0 || (n.Content[0].Kind == yaml.ScalarNode && n.Content[0].Tag == "!!null") {
			continue
		}
		out, err := yaml.Marshal(&n)
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		docs = append(docs, out)
	}
	return docs
}

func readManifests(t *testing.T) (map[string][]manifest, *kustypes.Kustomization) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(kubeDir, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	byFile := map[string][]manifest{}
	var kust *kustypes.Kustomization
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if filepath.Base(f) == "kustomization.yaml" {
			var k kustypes.Kustomization
			if err := k8syaml.UnmarshalStrict(b, &k); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			kust = &k
			continue
		}
		for _, doc := range splitDocuments(t, f, b) {
			var head struct {
				APIVersion string `json:"apiVersion"`
				Kind       string `json:"kind"`
				Metadata   struct {
					Name string `json:"name"`
				} `json:"metadata"`
			}
			if err := k8syaml.Unmarshal(doc, &head); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if head.APIVersion == "" || head.Kind == "" || head.Metadata.Name == "" {
				t.Fatalf("%s: a document without apiVersion, kind or metadata.name", f)
			}
			byFile[f] = append(byFile[f], manifest{file: f, apiVersion: head.APIVersion, kind: head.Kind, name: head.Metadata.Name, raw: doc})
		}
	}
	if kust == nil {
		t.Fatalf("%s/kustomization.yaml is missing", kubeDir)
	}
	return byFile, kust
}

// --- kubeconform ----------------------------------------------------------

type gvk struct{ group, version, kind string }

func gvkOf(apiVersion, kind string) gvk {
	g, v, ok := strings.Cut(apiVersion, "/")
	if !ok {
		g, v = "", apiVersion
	}
	return gvk{g, v, kind}
}

// schemaFile is kubeconform's file name for a kind, as its
// {{ .ResourceKind }}{{ .KindSuffix }} template makes it.
func schemaFile(apiVersion, kind string) string {
	parts := strings.Split(apiVersion, "/")
	suffix := "-" + strings.ToLower(strings.Split(parts[0], ".")[0])
	if len(parts) > 1 {
		suffix += "-" + strings.ToLower(parts[1])
	}
	return strings.ToLower(kind) + suffix + ".json"
}

// writeSchemas writes a standalone strict JSON schema (draft 4, what
// kubeconform compiles) for each of the kinds into dir, from the Kubernetes
// OpenAPI definitions kyaml embeds: each kind's definition with every
// definition it references under "definitions", additionalProperties: false
// on every object with declared properties (so unknown fields fail), and
// int-or-string and quantity as the strings or numbers the API accepts.
func writeSchemas(t *testing.T, dir string, kinds map[gvk]string) {
	t.Helper()
	defs := map[string]map[string]any{}
	byGVK := map[gvk]string{}
	for name, s := range openapi.Schema().Definitions {
		b, err := json.Marshal(s)
		if err != nil {
			t.Fatalf("definition %s: %v", name, err)
		}
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		defs[name] = m
		gvks, _ := m["x-kubernetes-group-version-kind"].([]any)
		for _, x := range gvks {
			x, _ := x.(map[string]any)
			g, _ := x["group"].(string)
			v, _ := x["version"].(string)
			k, _ := x["kind"].(string)
			if strings.HasPrefix(name, "io.k8s.api.") || strings.HasPrefix(name, "io.k8s.apimachinery.") {
				byGVK[gvk{g, v, k}] = name
			}
		}
	}
	if len(defs) < 100 {
		t.Fatalf("kyaml's embedded OpenAPI has %d definitions: not the Kubernetes API", len(defs))
	}
	defs["io.k8s.apimachinery.pkg.util.intstr.IntOrString"] = map[string]any{
		"oneOf": []any{map[string]any{"type": "string"}, map[string]any{"type": "integer"}},
	}
	defs["io.k8s.apimachinery.pkg.api.resource.Quantity"] = map[string]any{
		"oneOf": []any{map[string]any{"type": "string"}, map[string]any{"type": "number"}},
	}
	for k, apiVersion := range kinds {
		name, ok := byGVK[k]
		if !ok {
			t.Fatalf("no OpenAPI definition for %s %s in kyaml's Kubernetes %s schema", apiVersion, k.kind, openapi.GetSchemaVersion())
		}
		closure := map[string]any{}
		var visit func(v any)
		visit = func(v any) {
			switch v := v.(type) {
			case map[string]any:
				if ref, ok := v["$ref"].(string); ok {
					d := strings.TrimPrefix(ref, "#/definitions/")
					if _, done := closure[d]; !done {
						def, ok := defs[d]
						if !ok {
							t.Fatalf("%s: dangling $ref %s", name, ref)
						}
						closure[d] = strictSchema(def)
						visit(def)
					}
				}
				for _, x := range v {
					visit(x)
				}
			case []any:
				for _, x := range v {
					visit(x)
				}
			}
		}
		root := strictSchema(defs[name]).(map[string]any)
		visit(defs[name])
		root["$schema"] = "http://json-schema.org/draft-04/schema#"
		root["definitions"] = closure
		b, err := json.Marshal(root)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, schemaFile(apiVersion, k.kind)), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// strictSchema returns a deep copy of s with additionalProperties: false on
// every object schema that declares properties and says nothing about others.
func strictSchema(s any) any {
	switch s := s.(type) {
	case map[string]any:
		if f, _ := s["format"].(string); f == "int-or-string" {
			return map[string]any{"oneOf": []any{map[string]any{"type": "string"}, map[string]any{"type": "integer"}}}
		}
		out := make(map[string]any, len(s)+1)
		for k, v := range s {
			switch k {
			case "properties", "patternProperties", "definitions":
				props := map[string]any{}
				for pk, pv := range v.(map[string]any) {
					props[pk] = strictSchema(pv)
				}
				out[k] = props
			case "items", "additionalProperties", "allOf", "anyOf", "oneOf", "not":
				out[k] = strictSchema(v)
			default:
				out[k] = v
			}
		}
		if _, hasProps := s["properties"]; hasProps {
			if _, said := s["additionalProperties"]; !said {
				out["additionalProperties"] = false
			}
		}
		return out
	case []any:
		out := make([]any, len(s))
		for i, v := range s {
			out[i] = strictSchema(v)
		}
		return out
	}
	return s
}

type kubeconformResult struct {
	Filename         string `json:"filename"`
	Kind             string `json:"kind"`
	Name             string `json:"name"`
	Version          string `json:"version"`
	Status           string `json:"status"`
	Msg              string `json:"msg"`
	ValidationErrors []struct {
		Path string `json:"path"`
		Msg  string `json:"msg"`
	} `json:"validationErrors"`
}

// kubeconform runs `go tool kubeconform -strict` on files with the schemas
// in schemaDir and returns one result per resource.
func kubeconform(t *testing.T, schemaDir string, files ...string) []kubeconformResult {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is not on PATH: kubeconform runs as `go tool kubeconform`: %v", err)
	}
	args := []string{"tool", "kubeconform", "-strict", "-verbose", "-output", "json",
		"-schema-location", filepath.Join(schemaDir, "{{ .ResourceKind }}{{ .KindSuffix }}.json")}
	cmd := exec.Command(goBin, append(args, files...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	runErr := cmd.Run()
	var out struct {
		Resources []kubeconformResult `json:"resources"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &out); err != nil {
		t.Fatalf("go tool kubeconform: %v (%v)\nstdout: %s\nstderr: %s", err, runErr, stdout.Bytes(), stderr.Bytes())
	}
	var exit *exec.ExitError
	if runErr != nil && !errors.As(runErr, &exit) {
		t.Fatalf("go tool kubeconform: %v\n%s", runErr, stderr.Bytes())
	}
	return out.Resources
}

func describe(r kubeconformResult) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %s %s/%s: %s %s", r.Filename, r.Status, r.Kind, r.Name, r.Version, r.Msg)
	for _, e := range r.ValidationErrors {
		fmt.Fprintf(&b, "\n\t%s: %s", e.Path, e.Msg)
	}
	return b.String()
}

func TestKubernetesSchemas(t *testing.T) {
	byFile, _ := readManifests(t)
	kinds := map[gvk]string{}
	var files []string
	count := 0
	for f, ms := range byFile {
		files = append(files, f)
		for _, m := range ms {
			kinds[gvkOf(m.apiVersion, m.kind)] = m.apiVersion
			count++
		}
	}
	slices.Sort(files)
	schemas := t.TempDir()
	writeSchemas(t, schemas, kinds)

	t.Run("files", func(t *testing.T) {
		results := kubeconform(t, schemas, files...)
		if len(results) != count {
			t.Errorf("kubeconform reported %d resources, the files have %d", len(results), count)
		}
		for _, r := range results {
			if r.Status != "statusValid" {
				t.Error(describe(r))
			}
		}
	})

	t.Run("kustomize build", func(t *testing.T) {
		built := filepath.Join(t.TempDir(), "built.yaml")
		if err := os.WriteFile(built, kustomizeBuild(t), 0o644); err != nil {
			t.Fatal(err)
		}
		results := kubeconform(t, schemas, built)
		if len(results) != count {
			t.Errorf("kubeconform reported %d resources in the build, the files have %d", len(results), count)
		}
		for _, r := range results {
			if r.Status != "statusValid" {
				t.Error(describe(r))
			}
		}
	})

	// The validator must catch what it is here for: a misspelt field, a wrong
	// type, a missing required field.
	t.Run("rejects broken manifests", func(t *testing.T) {
		dir := t.TempDir()
		broken := map[string]string{
			"unknown-field.yaml": `apiVersion: apps/v1
kind: Deployment
metadata: {name: x}
spec:
  replicas: 1
  selector: {matchLabels: {a: b}}
  template:
    metadata: {labels: {a: b}}
    spec:
      containers:
        - name: x
          image: x
          readinessProbe: {httpGet: {path: /readyz, port: 8080}, periodSecond: 5}
`,
			"wrong-type.yaml": `apiVersion: apps/v1
kind: Deployment
metadata: {name: x}
spec:
  replicas: "two"
  selector: {matchLabels: {a: b}}
  template:
    metadata: {labels: {a: b}}
    spec: {containers: [{name: x, image: x}]}
`,
			"missing-required.yaml": `apiVersion: batch/v1
kind: Job
metadata: {name: x}
spec:
  template:
    spec: {restartPolicy: Never}
`,
			// Strictness reaches the pod inside a CronJob's jobTemplate.
			"cronjob-unknown-field.yaml": `apiVersion: batch/v1
kind: CronJob
metadata: {name: x}
spec:
  schedule: "17 3 * * *"
  jobTemplate:
    spec:
      template:
        spec:
          restartPolicy: Never
          containers:
            - name: x
              image: x
              securityContext: {readOnlyRootFileSystem: true}
`,
		}
		var paths []string
		for name, body := range broken {
			p := filepath.Join(dir, name)
			if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
			paths = append(paths, p)
		}
		results := kubeconform(t, schemas, paths...)
		if len(results) != len(broken) {
			t.Fatalf("kubeconform reported %d results for %d broken files", len(results), len(broken))
		}
		for _, r := range results {
			if r.Status != "statusInvalid" {
				t.Errorf("not rejected as invalid: %s", describe(r))
			}
		}
	})

	// A kind whose schema is missing from the schema location is an error,
	// never skipped as valid: kubeconform runs without -ignore-missing-schemas.
	t.Run("missing schema is an error", func(t *testing.T) {
		f := filepath.Join(kubeDir, "retention-cronjob.yaml")
		results := kubeconform(t, t.TempDir(), f)
		if len(results) != len(byFile[f]) {
			t.Fatalf("kubeconform reported %d results for the %d resources of %s", len(results), len(byFile[f]), f)
		}
		for _, r := range results {
			if r.Status != "statusError" {
				t.Errorf("without a schema: %s; want statusError", describe(r))
			}
		}
	})
}

func kustomizeBuild(t *testing.T) []byte {
	t.Helper()
	res, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), kubeDir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", kubeDir, err)
	}
	b, err := res.AsYaml()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// --- typed decoding and what no schema checks -----------------------------

type kubeObjects struct {
	namespaces  []corev1.Namespace
	configMaps  map[string]corev1.ConfigMap
	secrets     map[string]corev1.Secret
	services    []corev1.Service
	deployments []appsv1.Deployment
	jobs        []batchv1.Job
	cronJobs    []batchv1.CronJob
	pdbs        []policyv1.PodDisruptionBudget
}

func decodeObjects(t *testing.T, byFile map[string][]manifest) kubeObjects {
	t.Helper()
	objs := kubeObjects{configMaps: map[string]corev1.ConfigMap{}, secrets: map[string]corev1.Secret{}}
	for _, f := range sortedKeys(byFile) {
		for _, m := range byFile[f] {
			var err error
			switch m.apiVersion + " " + m.kind {
			case "v1 Namespace":
				var o corev1.Namespace
				err = k8syaml.UnmarshalStrict(m.raw, &o)
				objs.namespaces = append(objs.namespaces, o)
			case "v1 ConfigMap":
				var o corev1.ConfigMap
				err = k8syaml.UnmarshalStrict(m.raw, &o)
				objs.configMaps[o.Name] = o
			case "v1 Secret":
				var o corev1.Secret
				err = k8syaml.UnmarshalStrict(m.raw, &o)
				objs.secrets[o.Name] = o
			case "v1 Service":
				var o corev1.Service
				err = k8syaml.UnmarshalStrict(m.raw, &o)
				objs.services = append(objs.services, o)
			case "apps/v1 Deployment":
				var o appsv1.Deployment
				err = k8syaml.UnmarshalStrict(m.raw, &o)
				objs.deployments = append(objs.deployments, o)
			case "batch/v1 Job":
				var o batchv1.Job
				err = k8syaml.UnmarshalStrict(m.raw, &o)
				objs.jobs = append(objs.jobs, o)
			case "batch/v1 CronJob":
				var o batchv1.CronJob
				err = k8syaml.UnmarshalStrict(m.raw, &o)
				objs.cronJobs = append(objs.cronJobs, o)
			case "policy/v1 PodDisruptionBudget":
				var o policyv1.PodDisruptionBudget
				err = k8syaml.UnmarshalStrict(m.raw, &o)
				objs.pdbs = append(objs.pdbs, o)
			default:
				t.Errorf("%s: %s %s: no typed check for this kind; add it to decodeObjects", f, m.apiVersion, m.kind)
				continue
			}
			if err != nil {
				t.Errorf("%s: %s %s: %v", f, m.kind, m.name, err)
			}
		}
	}
	return objs
}

func TestKubernetesManifests(t *testing.T) {
	byFile, kust := readManifests(t)
	objs := decodeObjects(t, byFile)
	cli := readInletCLI(t)

	t.Run("kustomization", func(t *testing.T) {
		listed := map[string]bool{}
		for _, r := range kust.Resources {
			if _, err := os.Stat(filepath.Join(kubeDir, r)); err != nil {
				t.Errorf("kustomization.yaml lists %s: %v", r, err)
			}
			listed[filepath.Join(kubeDir, r)] = true
		}
		for f := range byFile {
			if !listed[f] {
				t.Errorf("%s is not in kustomization.yaml's resources", f)
			}
		}
		if len(objs.namespaces) != 1 {
			t.Fatalf("want one Namespace, have %d", len(objs.namespaces))
		}
		ns := objs.namespaces[0].Name
		if kust.Namespace != ns {
			t.Errorf("kustomization namespace %q, the Namespace is %q", kust.Namespace, ns)
		}
		for f, ms := range byFile {
			for _, m := range ms {
				var meta struct {
					Metadata struct {
						Namespace string `json:"namespace"`
					} `json:"metadata"`
				}
				_ = k8syaml.Unmarshal(m.raw, &meta)
				if m.kind != "Namespace" && meta.Metadata.Namespace != ns {
					t.Errorf("%s: %s %s is in namespace %q, want %q", f, m.kind, m.name, meta.Metadata.Namespace, ns)
				}
			}
		}
		// The build sets the image everywhere the manifests say "inlet".
		built := kustomizeBuild(t)
		var newImage string
		for _, img := range kust.Images {
			if img.Name == "inlet" {
				newImage = img.NewName + ":" + img.NewTag
			}
		}
		if newImage == "" {
			t.Fatal("kustomization.yaml has no images entry for the inlet image")
		}
		templates := 0
		for _, doc := range splitDocuments(t, "kustomize build", built) {
			type podTemplate struct {
				Template struct {
					Spec corev1.PodSpec `json:"spec"`
				} `json:"template"`
			}
			var o struct {
				Kind string `json:"kind"`
				Spec struct {
					podTemplate
					// A CronJob's pods are in its jobTemplate.
					JobTemplate struct {
						Spec podTemplate `json:"spec"`
					} `json:"jobTemplate"`
				} `json:"spec"`
			}
			if err := k8syaml.Unmarshal(doc, &o); err != nil {
				t.Fatal(err)
			}
			containers := append(o.Spec.Template.Spec.Containers, o.Spec.JobTemplate.Spec.Template.Spec.Containers...)
			if len(containers) > 0 {
				templates++
			}
			for _, c := range containers {
				if c.Image != newImage {
					t.Errorf("kustomize build: %s container %s has image %q, want %q", o.Kind, c.Name, c.Image, newImage)
				}
			}
		}
		if want := len(objs.deployments) + len(objs.jobs) + len(objs.cronJobs); templates != want {
			t.Errorf("kustomize build: %d objects with pod templates, the manifests have %d", templates, want)
		}
	})

	if len(objs.configMaps) != 1 {
		t.Fatalf("want one ConfigMap (inlet.yaml), have %d", len(objs.configMaps))
	}

	pods := map[string]corev1.PodTemplateSpec{}
	replicas := map[string]int32{}
	for _, d := range objs.deployments {
		name := strings.TrimPrefix(d.Name, "inlet-")
		pods[name] = d.Spec.Template
		if d.Spec.Replicas != nil {
			replicas[name] = *d.Spec.Replicas
		}
		where := "Deployment " + d.Name
		sel := d.Spec.Selector
		if sel == nil || len(sel.MatchLabels) == 0 {
			t.Errorf("%s: no selector.matchLabels", where)
		}
		for k, v := range sel.MatchLabels {
			if d.Spec.Template.Labels[k] != v {
				t.Errorf("%s: selector %s=%s does not match the pod template's labels", where, k, v)
			}
		}
	}
	for _, svc := range services {
		if _, ok := pods[svc]; !ok {
			t.Errorf("no Deployment inlet-%s", svc)
		}
		if replicas[svc] < 2 {
			t.Errorf("Deployment inlet-%s: %d replicas, want at least 2", svc, replicas[svc])
		}
	}
	if len(objs.jobs) != 1 {
		t.Fatalf("want one Job (migrate), have %d", len(objs.jobs))
	}
	pods["migrate"] = objs.jobs[0].Spec.Template
	if rp := objs.jobs[0].Spec.Template.Spec.RestartPolicy; rp != corev1.RestartPolicyNever && rp != corev1.RestartPolicyOnFailure {
		t.Errorf("Job %s: restartPolicy %q", objs.jobs[0].Name, rp)
	}
	if len(objs.cronJobs) != 1 || objs.cronJobs[0].Name != "inlet-retention" {
		t.Fatalf("want one CronJob, inlet-retention; have %d", len(objs.cronJobs))
	}
	pods["retention"] = objs.cronJobs[0].Spec.JobTemplate.Spec.Template
	t.Run("retention CronJob", func(t *testing.T) { checkCronJob(t, objs.cronJobs[0]) })

	connections := 0
	for _, name := range sortedKeys(pods) {
		t.Run(name, func(t *testing.T) {
			n := checkPod(t, cli, objs, name, pods[name])
			if r, ok := replicas[name]; ok {
				n *= int(r)
			}
			connections += n
		})
	}
	if max := maxConnections(t); connections > max*3/4 {
		t.Errorf("the pods may open %d connections at once, more than 3/4 of max_connections (%d) in postgres/inlet.conf", connections, max)
	}

	t.Run("ingress Service and PodDisruptionBudget", func(t *testing.T) {
		ingress := pods["ingress"]
		if len(objs.services) != 1 {
			t.Fatalf("want one Service (ingress), have %d", len(objs.services))
		}
		s := objs.services[0]
		for k, v := range s.Spec.Selector {
			if ingress.Labels[k] != v {
				t.Errorf("Service %s: selector %s=%s does not select the ingress pods", s.Name, k, v)
			}
		}
		if len(s.Spec.Selector) == 0 {
			t.Errorf("Service %s has no selector", s.Name)
		}
		for _, p := range s.Spec.Ports {
			if _, ok := containerPort(ingress.Spec.Containers[0], p.TargetPort); !ok {
				t.Errorf("Service %s: targetPort %s is no port of the ingress container", s.Name, p.TargetPort.String())
			}
		}
		if len(objs.pdbs) != 1 {
			t.Fatalf("want one PodDisruptionBudget (ingress), have %d", len(objs.pdbs))
		}
		pdb := objs.pdbs[0]
		if pdb.Spec.Selector == nil || len(pdb.Spec.Selector.MatchLabels) == 0 {
			t.Fatalf("PodDisruptionBudget %s has no selector", pdb.Name)
		}
		for k, v := range pdb.Spec.Selector.MatchLabels {
			if ingress.Labels[k] != v {
				t.Errorf("PodDisruptionBudget %s: selector %s=%s does not select the ingress pods", pdb.Name, k, v)
			}
		}
		if m := pdb.Spec.MinAvailable; m == nil || m.Type != intstr.Int || m.IntValue() < 1 || int32(m.IntValue()) >= replicas["ingress"] {
			t.Errorf("PodDisruptionBudget %s: minAvailable should be a number from 1 to replicas-1 (%d)", pdb.Name, replicas["ingress"]-1)
		}
	})
}

// checkCronJob checks what keeps a daily maintenance CronJob well behaved:
// one run at a time, runs that end before the next is due, missed runs
// skipped rather than piled up, and finished Jobs kept for inspection.
func checkCronJob(t *testing.T, cj batchv1.CronJob) {
	t.Helper()
	const day = 24 * 60 * 60
	if err := dailySchedule(cj.Spec.Schedule); err != nil {
		t.Errorf("schedule %q: %v", cj.Spec.Schedule, err)
	}
	if cj.Spec.Suspend != nil && *cj.Spec.Suspend {
		t.Error("suspend: true: it would never run")
	}
	if cj.Spec.ConcurrencyPolicy != batchv1.ForbidConcurrent {
		t.Errorf("concurrencyPolicy %q, want Forbid: two runs would contend for the same partition locks", cj.Spec.ConcurrencyPolicy)
	}
	// Under 10s the controller may never start it; unset, 100 missed runs
	// stop the CronJob for good.
	if d := cj.Spec.StartingDeadlineSeconds; d == nil || *d < 10 || *d >= day {
		t.Error("startingDeadlineSeconds should be set, from 10s to under a day")
	}
	if l := cj.Spec.SuccessfulJobsHistoryLimit; l == nil || *l < 1 {
		t.Error("successfulJobsHistoryLimit should keep at least one finished Job (its log is the report)")
	}
	if l := cj.Spec.FailedJobsHistoryLimit; l == nil || *l < 1 {
		t.Error("failedJobsHistoryLimit should keep at least one failed Job to inspect")
	}
	js := cj.Spec.JobTemplate.Spec
	if js.BackoffLimit == nil {
		t.Error("jobTemplate: no backoffLimit (the default, 6, retries for a long time)")
	}
	if d := js.ActiveDeadlineSeconds; d == nil || *d <= 0 || *d >= day {
		t.Error("jobTemplate: activeDeadlineSeconds should end a stuck run within the day")
	}
	if rp := js.Template.Spec.RestartPolicy; rp != corev1.RestartPolicyNever && rp != corev1.RestartPolicyOnFailure {
		t.Errorf("jobTemplate: restartPolicy %q", rp)
	}
	pod := js.Template.Labels
	for k, v := range cj.Labels {
		if pod[k] != v {
			t.Errorf("jobTemplate: pod label %s=%q, the CronJob's is %q", k, pod[k], v)
		}
	}
}

// dailySchedule accepts a cron schedule that runs once a day: "M H * * *"
// with a single minute and hour, or @daily / @midnight.
func dailySchedule(s string) error {
	if s == "@daily" || s == "@midnight" {
		return nil
	}
	f := strings.Fields(s)
	if len(f) != 5 {
		return fmt.Errorf("%d fields, want 5 (minute hour day month weekday)", len(f))
	}
	for i, max := range []int{59, 23} {
		n, err := strconv.Atoi(f[i])
		if err != nil || n < 0 || n > max {
			return fmt.Errorf("field %d %q: want one number from 0 to %d (once a day)", i+1, f[i], max)
		}
	}
	if f[2] != "*" || f[3] != "*" || f[4] != "*" {
		return errors.New("day, month and weekday should be *: once a day")
	}
	return nil
}

func TestDailySchedule(t *testing.T) {
	for s, ok := range map[string]bool{
		"17 3 * * *": true, "0 0 * * *": true, "@daily": true,
		"*/5 * * * *": false, "17 * * * *": false, "17 3 * * 1": false, "60 3 * * *": false, "17 3 * *": false, "@hourly": false,
	} {
		if err := dailySchedule(s); (err == nil) != ok {
			t.Errorf("dailySchedule(%q) = %v; want ok=%t", s, err, ok)
		}
	}
}

// containerPort resolves a probe's or Service's port, by name or number.
func containerPort(c corev1.Container, p intstr.IntOrString) (int32, bool) {
	for _, cp := range c.Ports {
		if (p.Type == intstr.String && cp.Name == p.StrVal) || (p.Type == intstr.Int && cp.ContainerPort == p.IntVal) {
			return cp.ContainerPort, true
		}
	}
	return 0, false
}

// probePort is the port where service answers the probes in cfg: the
// health listener of the streamer and consumer, and ingress's metrics
// listener, not its webhook port. That port takes at most
// ingress.max_connections connections at once; past them a probe waits in
// the accept queue with the webhooks, so a flood of connections or a slow
// database would fail it and get a healthy ingress restarted.
func probePort(t *testing.T, where string, cfg inletyaml.Config, service string) int {
	t.Helper()
	if service != "ingress" {
		return listenPort(t, where, cfg, service)
	}
	addr := cfg.Ingress.MetricsListen
	if addr == "off" {
		t.Fatalf("%s: ingress.metrics_listen is off: the probes need it (the webhook port is capped by ingress.max_connections)", where)
	}
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("%s: ingress.metrics_listen %q: %v", where, addr, err)
	}
	n, err := strconv.Atoi(p)
	if err != nil {
		t.Fatalf("%s: ingress.metrics_listen %q has no numeric port", where, addr)
	}
	return n
}

// checkPod checks one pod template (name is the inlet subcommand it runs) and
// returns how many database connections one of its pods may open.
func checkPod(t *testing.T, cli inletCLI, objs kubeObjects, name string, pod corev1.PodTemplateSpec) int {
	spec := pod.Spec
	if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
		t.Error("automountServiceAccountToken should be false: Inlet never calls the Kubernetes API")
	}
	if len(spec.Containers) != 1 {
		t.Fatalf("want one container, have %d", len(spec.Containers))
	}
	c := spec.Containers[0]

	// Security: the restricted Pod Security Standard.
	psc := spec.SecurityContext
	sc := c.SecurityContext
	if sc == nil {
		t.Fatal("container has no securityContext")
	}
	nonRoot := (sc.RunAsNonRoot != nil && *sc.RunAsNonRoot) || (psc != nil && psc.RunAsNonRoot != nil && *psc.RunAsNonRoot)
	if !nonRoot {
		t.Error("runAsNonRoot is not true")
	}
	if psc != nil && psc.RunAsUser != nil && *psc.RunAsUser == 0 {
		t.Error("runAsUser 0")
	}
	if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Error("readOnlyRootFilesystem is not true")
	}
	if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Error("allowPrivilegeEscalation is not false")
	}
	if sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") || len(sc.Capabilities.Add) > 0 {
		t.Error("capabilities should drop ALL and add none")
	}
	if (psc == nil || psc.SeccompProfile == nil) && sc.SeccompProfile == nil {
		t.Error("no seccompProfile (RuntimeDefault)")
	}

	// Resources.
	for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		req, hasReq := c.Resources.Requests[r]
		lim, hasLim := c.Resources.Limits[r]
		if !hasReq || !hasLim {
			t.Errorf("resources: %s needs both a request and a limit", r)
		} else if req.Cmp(lim) > 0 {
			t.Errorf("resources: %s request %s above its limit %s", r, req.String(), lim.String())
		}
	}

	// The command line: the image's ENTRYPOINT is inlet, args are its
	// arguments.
	if len(c.Command) != 0 {
		t.Errorf("command %q overrides the image's ENTRYPOINT [inlet]; use args", c.Command)
	}
	if c.Image != "inlet" {
		t.Errorf("image %q: the manifests say \"inlet\" and kustomization.yaml's images sets the real one", c.Image)
	}
	inv, err := parseInvocation(cli, c.Args)
	if err != nil {
		t.Fatalf("args %q: %v", c.Args, err)
	}
	if inv.sub != name {
		t.Errorf("args run inlet %s, want inlet %s", inv.sub, name)
	}
	if len(inv.positional) > 0 {
		t.Errorf("args: stray arguments %q", inv.positional)
	}

	// The environment, as the container will see it.
	env := map[string]string{}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil:
			ref := e.ValueFrom.SecretKeyRef
			s, ok := objs.secrets[ref.Name]
			if !ok {
				t.Errorf("env %s: no Secret %q", e.Name, ref.Name)
				continue
			}
			v, ok := s.StringData[ref.Key]
			if !ok {
				v, ok = string(s.Data[ref.Key]), s.Data[ref.Key] != nil
			}
			if !ok {
				t.Errorf("env %s: Secret %s has no key %q", e.Name, ref.Name, ref.Key)
				continue
			}
			env[e.Name] = v
		case e.ValueFrom != nil:
			t.Errorf("env %s: only secretKeyRef and value are checked; extend checkPod", e.Name)
		default:
			env[e.Name] = e.Value
		}
	}
	dbURL, ok := env["DATABASE_URL"]
	if !ok {
		t.Fatal("no DATABASE_URL in env")
	}
	conns := checkDatabaseURL(t, "pod "+name, name, dbURL, loginRole[name])

	if slices.Contains(ownerTools, name) {
		if c.LivenessProbe != nil || c.ReadinessProbe != nil {
			t.Errorf("%s is a one-shot Job: no probes", name)
		}
		if _, ok := inv.flags["config"]; ok {
			t.Errorf("%s needs only DATABASE_URL: with --config it would also need every secret inlet.yaml names", name)
		}
		if _, ok := inv.flags["database-url"]; ok {
			t.Error("--database-url puts the owner's password in the pod spec; use DATABASE_URL from the Secret")
		}
		if len(c.VolumeMounts) > 0 || len(spec.Volumes) > 0 {
			t.Errorf("%s reads no file: no volumes", name)
		}
		// The schema owner, the one login whose objects these tools change.
		for _, e := range c.Env {
			if e.Name == "DATABASE_URL" && (e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil || e.ValueFrom.SecretKeyRef.Key != "DATABASE_URL_MIGRATE") {
				t.Errorf("DATABASE_URL should come from the Secret's DATABASE_URL_MIGRATE (the schema owner)")
			}
		}
		// It reads no config file, so it holds none of the services' secrets.
		for _, cmName := range sortedKeys(objs.configMaps) {
			if y, ok := objs.configMaps[cmName].Data["inlet.yaml"]; ok {
				checkNeedlessSecrets(t, "pod "+name, []byte(y), nil, env)
			}
		}
		if name == "retention" {
			if err := retentionArgs(inv); err != nil {
				t.Errorf("args %q: %v", c.Args, err)
			}
			return poolCap(t, "runRetention")
		}
		return 1
	}

	// The config file: --config is the mounted ConfigMap key.
	cfgPath, ok := inv.flags["config"]
	if !ok {
		t.Fatal("no --config: inlet would look for ./inlet.yaml")
	}
	var cfgYAML string
	found := false
	for _, m := range c.VolumeMounts {
		rel, err := filepath.Rel(m.MountPath, cfgPath)
		if err != nil || strings.HasPrefix(rel, "..") {
			continue
		}
		for _, v := range spec.Volumes {
			if v.Name != m.Name || v.ConfigMap == nil {
				continue
			}
			cm, ok := objs.configMaps[v.ConfigMap.Name]
			if !ok {
				t.Fatalf("volume %s: no ConfigMap %q", v.Name, v.ConfigMap.Name)
			}
			key := rel
			for _, it := range v.ConfigMap.Items {
				if it.Path == rel {
					key = it.Key
				}
			}
			cfgYAML, found = cm.Data[key]
			if !found {
				t.Fatalf("--config %s: ConfigMap %s has no key %q", cfgPath, cm.Name, key)
			}
			if !m.ReadOnly {
				t.Errorf("volumeMount %s should be readOnly", m.Name)
			}
		}
	}
	if !found {
		t.Fatalf("--config %s is not in a mounted ConfigMap", cfgPath)
	}
	needed := configVars(t, []byte(cfgYAML), config.ServiceOf(name))
	for _, v := range needed {
		if _, ok := env[v]; !ok {
			t.Errorf("inlet.yaml names ${%s} in a section inlet %s reads, which the container's env lacks", v, name)
		}
	}
	checkNeedlessSecrets(t, "pod "+name, []byte(cfgYAML), needed, env)
	cfg := parseConfig(t, "ConfigMap inlet.yaml in pod "+name, name, []byte(cfgYAML), env)

	// Probes: /healthz for liveness, /readyz for readiness, on the port the
	// service answers them on (ingress: its metrics listener, not the
	// webhook port).
	want := int32(probePort(t, "ConfigMap inlet.yaml", cfg, name))
	for kind, p := range map[string]struct {
		probe *corev1.Probe
		path  string
	}{"livenessProbe": {c.LivenessProbe, "/healthz"}, "readinessProbe": {c.ReadinessProbe, "/readyz"}} {
		if p.probe == nil || p.probe.HTTPGet == nil {
			t.Errorf("%s: want an httpGet probe of %s", kind, p.path)
			continue
		}
		if p.probe.HTTPGet.Path != p.path {
			t.Errorf("%s: path %q, want %q", kind, p.probe.HTTPGet.Path, p.path)
		}
		port, ok := containerPort(c, p.probe.HTTPGet.Port)
		if !ok {
			t.Errorf("%s: port %s is no containerPort", kind, p.probe.HTTPGet.Port.String())
		} else if port != want {
			t.Errorf("%s: port %d, but inlet %s answers the probes on %d", kind, port, name, want)
		}
	}

	// Every declared port is one the service listens on, on the pod's
	// address: a loopback listener (the default of the /metrics listeners)
	// is out of reach of the kubelet's probes and of Prometheus.
	for _, cp := range c.Ports {
		if err := reachable(cfg, name, int(cp.ContainerPort)); err != nil {
			t.Errorf("containerPort %s (%d): %v", cp.Name, cp.ContainerPort, err)
		}
	}

	// Stopping: the grace period outlasts the drain deadline.
	grace := 30 * time.Second
	if spec.TerminationGracePeriodSeconds != nil {
		grace = time.Duration(*spec.TerminationGracePeriodSeconds) * time.Second
	}
	if d := stopDeadline(t, cli, inv); grace <= d {
		t.Errorf("terminationGracePeriodSeconds %s is not longer than the drain deadline %s: SIGKILL cuts the drain", grace, d)
	}
	if name == "streamer" && cfg.Streamer.Wake != "poll" {
		conns++ // the LISTEN (or replication) connection
	}
	return conns
}
