package config

import (
	"strings"
	"testing"
)

func TestCheckListen(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		addr string
		want string // "" when accepted
	}{
		{":8080", ""}, {"127.0.0.1:8080", ""}, {"[::1]:8080", ""}, {"localhost:0", ""}, {":http", ""},
		{"off", ""}, {"", ""},
		{"8080", `not host:port (write ":8080"`},
		{"localhost:80800", "not between 0 and 65535"},
		{"localhost", "not host:port"},
		{"127.0.0.1:nosuchservice", "neither a number nor a known service"},
	} {
		err := CheckListen("x.listen", c.addr, "", "off")
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%q: %v, want accepted", c.addr, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "x.listen: ")):
			t.Errorf("%q: %v, want an error naming x.listen and saying %q", c.addr, err, c.want)
		}
	}
}
