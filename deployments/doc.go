// Package deployments holds the ways to run Inlet outside `inlet dev`, as
// files rather than code: a Docker image and a compose file (compose/,
// docker/), Kubernetes manifests (kubernetes/) and systemd units
// (systemd/), each with a daily run of inlet retention (a CronJob, a timer),
// and the PostgreSQL settings and login roles Inlet needs (postgres/). See
// README.md in this folder.
//
// The package's only Go code is its tests, which validate those files in
// `go test ./...`: every Kubernetes manifest against the Kubernetes JSON
// schemas with kubeconform (a Go tool of this module, fed schemas generated
// offline from the OpenAPI document that sigs.k8s.io/kustomize/kyaml embeds),
// strict decoding into the k8s.io/api types, the kustomize build, the compose
// file's services and dependencies, the systemd units and timer, and every
// inlet.yaml here through Inlet's own config loader.
package deployments
