package main

import (
	"net/url"
	"regexp"
	"strings"
)

// redactMark stands where a password was: url.URL.Redacted's mark.
const redactMark = "xxxxx"

// redactURL is s, a URL or a PostgreSQL key=value connection string, fit to
// print or log: the password of its user info (url.URL.Redacted), a user
// name standing alone outside postgres:// URLs (a token, in http:// and
// nats://), and the value of any parameter named for a password, secret,
// token or key become "xxxxx". A URL that does not parse keeps only its
// scheme and what follows the last '@'. Every URL a command prints or logs
// goes through it.
func redactURL(s string) string {
	if !strings.Contains(s, "://") {
		return secretParam.ReplaceAllString(s, "${1}"+redactMark) // host=… password=…
	}
	u, err := url.Parse(s)
	if err != nil {
		scheme, rest, _ := strings.Cut(s, "://")
		if at := strings.LastIndex(rest, "@"); at >= 0 {
			rest = redactMark + rest[at:]
		}
		return scheme + "://" + rest
	}
	if u.RawQuery != "" {
		parts := strings.Split(u.RawQuery, "&")
		for i, p := range parts {
			if k, _, ok := strings.Cut(p, "="); ok && secretKey(k) {
				parts[i] = k + "=" + redactMark
			}
		}
		u.RawQuery = strings.Join(parts, "&")
	}
	if _, hasPassword := u.User.Password(); u.User != nil && !hasPassword && u.Scheme != "postgres" && u.Scheme != "postgresql" {
		u.User = url.User(redactMark) // a user name alone is a token in http:// and nats:// URLs
	}
	return u.Redacted()
}

// secretParam is a password, secret, token or key in a key=value connection string,
// its value bare or single-quoted.
var secretParam = regexp.MustCompile(`(?i)(\b[a-z_]*(?:password|secret|token|key)[a-z_]*\s*=\s*)('(?:\\.|[^'])*'|\S*)`)

func secretKey(k string) bool {
	if uk, err := url.QueryUnescape(k); err == nil {
		k = uk
	}
	k = strings.ToLower(k)
	for _, w := range []string{"password", "secret", "token", "key"} {
		if strings.Contains(k, w) {
			return true
		}
	}
	return false
}
