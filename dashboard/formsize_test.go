package dashboard_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// A form over the dashboard's limit is refused as too large before any of
// its fields is read. Read from the cut body, the token was "": an oversized
// login answered 401 "Wrong token." and was charged to the address's budget
// of wrong tokens; an oversized replay form answered 403 "CSRF token
// missing".
func TestOversizedFormIs413(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	pad := strings.Repeat("a", 9<<10)

	c := b.client(t)
	form := url.Values{"next": {"/dashboard/" + pad}, "token": {token}}
	if r := c.do("POST", "/dashboard/login", form, c.sameOrigin()); r.code != http.StatusRequestEntityTooLarge || strings.Contains(r.body, "Wrong token") {
		t.Errorf("login with a %d-byte form: %d, want 413 (not a wrong token)", len(form.Encode()), r.code)
	}

	c.login()
	form = url.Values{"job_id": {"1"}, "csrf": {c.csrf("/dashboard/")}, "return": {"/dashboard/" + pad}}
	if r := c.do("POST", "/dashboard/replay", form, c.sameOrigin()); r.code != http.StatusRequestEntityTooLarge {
		t.Errorf("replay with a %d-byte form: %d, want 413", len(form.Encode()), r.code)
	}
	// Under the limit the same forms still work.
	if r := c.do("POST", "/dashboard/replay", url.Values{"job_id": {"x"}, "csrf": {c.csrf("/dashboard/")}}, c.sameOrigin()); r.code != http.StatusBadRequest {
		t.Errorf("replay with a small form and a bad job id: %d, want 400", r.code)
	}
}
