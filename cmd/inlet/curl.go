package main

import (
	"errors"
	"fmt"
	"net/http"
	neturl "net/url"
	"slices"
	"strings"
	"unicode/utf8"
)

// curlCommand is a ready curl command line sending method, url, h and body
// exactly, quoted for a POSIX shell. It refuses a request that carries one
// of secrets itself (GitLab's token, Okta's authorization, Graph's
// clientState, Meta's verify token in the URL), which a printed
// command would disclose, and a body that is no text.
func curlCommand(method, url string, h http.Header, body []byte, secrets []string) (string, error) {
	unescaped, err := neturl.QueryUnescape(url)
	if err != nil {
		unescaped = url
	}
	for _, s := range secrets {
		if s != "" && (strings.Contains(url, s) || strings.Contains(unescaped, s)) {
			return "", errors.New("the request carries the secret itself in its URL (Meta's hub.verify_token); a printed command would disclose it")
		}
	}
	for name, vals := range h {
		for _, v := range vals {
			for _, s := range secrets {
				if s != "" && strings.Contains(v, s) {
					return "", fmt.Errorf("the request carries the secret itself in its %s header; a printed command would disclose it", name)
				}
			}
		}
	}
	for _, s := range secrets {
		if s != "" && strings.Contains(string(body), s) {
			return "", errors.New("the request carries the secret itself in its body (Microsoft Graph's clientState); a printed command would disclose it")
		}
	}
	if !utf8.Valid(body) || slices.Contains(body, 0) {
		return "", errors.New("the body is not text a command line can carry")
	}
	first := "curl -i "
	if implied := map[bool]string{true: http.MethodPost, false: http.MethodGet}[len(body) > 0]; method != implied {
		first += "-X " + shellQuote(method) + " "
	}
	parts := []string{first + shellQuote(url)}
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for n := range h {
			if !yield(n) {
				return
			}
		}
	}) {
		for _, v := range h[name] {
			parts = append(parts, "-H "+shellQuote(name+": "+v))
		}
	}
	if len(body) > 0 {
		parts = append(parts, "--data-raw "+shellQuote(string(body)))
	}
	return strings.Join(parts, " \\\n    "), nil
}

// shellQuote quotes s for a POSIX shell: single quotes, each ' written '\”.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
