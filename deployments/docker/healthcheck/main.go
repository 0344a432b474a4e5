// Command inlet-healthcheck is the probe of Inlet's container image, for
// docker compose healthchecks: the image is distroless (no shell, curl or
// wget), so it carries this instead. It GETs one URL and exits 0 when the
// answer is 2xx, 1 when it is not or nothing answers, 2 on a usage error.
//
//	inlet-healthcheck http://127.0.0.1:8080/healthz
package main

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"time"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stderr))
}

func run(args []string, stderr io.Writer) int {
	if len(args) != 1 {
		fmt.Fprintln(stderr, "usage: inlet-healthcheck http://HOST:PORT/PATH")
		return 2
	}
	u, err := url.Parse(args[0])
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		fmt.Fprintf(stderr, "inlet-healthcheck: %q is not an http:// or https:// URL\n", args[0])
		return 2
	}
	client := &http.Client{Timeout: 3 * time.Second}
	resp, err := client.Get(u.String()) //nolint:gosec // G704: the URL the container's healthcheck was given, checked to be http(s) above
	if err != nil {
		fmt.Fprintf(stderr, "inlet-healthcheck: %v\n", err)
		return 1
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		fmt.Fprintf(stderr, "inlet-healthcheck: %s answered %s\n", u.Redacted(), resp.Status)
		return 1
	}
	return 0
}
