// Package curlcmd reads the curl command lines Inlet prints (`inlet send
// --curl`, `inlet dev`) back into the request they send, for tests.
package curlcmd

import (
	"fmt"
	"net/http"
	"os/exec"
	"strings"
)

// Parse reads cmd as the shell does (sh runs it with curl replaced by a
// function printing its arguments) and returns the request it sends:
// curl -i [-X METHOD] URL [-H 'Name: value']... [--data-raw BODY]. The
// method is POST with a body and GET without, unless -X names one.
func Parse(cmd string) (method, url string, h http.Header, body []byte, err error) {
	out, err := exec.Command("sh", "-c", `curl() { for a in "$@"; do printf '%s\0' "$a"; done; }; `+cmd).Output() //nolint:gosec // G204: tests only: cmd is the line the command under test printed, run with curl replaced by a function
	if err != nil {
		return "", "", nil, nil, fmt.Errorf("sh -c %q: %w", cmd, err)
	}
	args := strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00")
	h = http.Header{}
	for i := 0; i < len(args); i++ {
		switch a := args[i]; a {
		case "-i":
		case "-X":
			i++
			method = args[i]
		case "-H":
			i++
			name, val, _ := strings.Cut(args[i], ": ")
			h.Add(name, val)
		case "--data-raw":
			i++
			body = []byte(args[i])
		default:
			url = a
		}
	}
	if method == "" {
		method = map[bool]string{true: http.MethodPost, false: http.MethodGet}[body != nil]
	}
	return method, url, h, body, nil
}
