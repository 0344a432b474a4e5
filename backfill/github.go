package backfill

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// GitHubConfig selects the webhook whose deliveries are backfilled.
type GitHubConfig struct {
	// Token is a token that may read the hook (admin:repo_hook or
	// admin:org_hook). Required; never logged or stored.
	Token string
	// BaseURL is the REST API's origin. Defaults to https://api.github.com.
	BaseURL string
	// Repo is "owner/name" of a repository webhook; or set Org.
	Repo string
	// Org is the organization of an organization webhook; or set Repo.
	Org string
	// HookID is the webhook's id. Required.
	HookID int64
	// Account is the operator's label of the account or server the webhook
	// is read from (com, ghes), never sent to GitHub: where two reconcile
	// entries of one source list the same repository or organization and
	// hook id on different servers, a run's scope names it. Empty: no
	// label. See CheckAccount for its form.
	Account string
}

// GitHub lists a webhook's deliveries (GET …/hooks/{id}/deliveries, newest
// first, 100 a page, cursor pagination by the Link header) and fetches each
// delivery for its request headers and payload. GitHub keeps deliveries for
// a limited time (about 3 days at the time of writing).
type GitHub struct {
	cfg  GitHubConfig
	path string // …/hooks/{id}/deliveries
}

// githubProvenance is the Inlet-Backfill header of events from GitHub.
const githubProvenance = "github-hook-deliveries"

// NewGitHub returns a Lister over one GitHub webhook's deliveries.
func NewGitHub(cfg GitHubConfig) (*GitHub, error) {
	switch {
	case cfg.Token == "":
		return nil, errors.New("github backfill: a token is required")
	case cfg.HookID <= 0:
		return nil, errors.New("github backfill: a hook id is required")
	case (cfg.Repo == "") == (cfg.Org == ""):
		return nil, errors.New("github backfill: set exactly one of a repository (owner/name) and an organization")
	}
	if err := CheckAccount(cfg.Account); err != nil {
		return nil, fmt.Errorf("github backfill: %w", err)
	}
	if cfg.BaseURL == "" {
		cfg.BaseURL = "https://api.github.com"
	}
	cfg.BaseURL = strings.TrimRight(cfg.BaseURL, "/")
	hook := strconv.FormatInt(cfg.HookID, 10)
	var path string
	if cfg.Repo != "" {
		owner, name, ok := strings.Cut(cfg.Repo, "/")
		if !ok || owner == "" || name == "" || strings.Contains(name, "/") {
			return nil, fmt.Errorf("github backfill: repository %q: want owner/name", cfg.Repo)
		}
		path = "/repos/" + url.PathEscape(owner) + "/" + url.PathEscape(name) + "/hooks/" + hook + "/deliveries"
	} else {
		path = "/orgs/" + url.PathEscape(cfg.Org) + "/hooks/" + hook + "/deliveries"
	}
	return &GitHub{cfg: cfg, path: path}, nil
}

func (g *GitHub) key() string { return "github " + g.cfg.BaseURL + g.path }

// scope is the webhook listed, repo=owner/name hook=123 or org=acme
// hook=123 (lower case, as GitHub reads names), after the account label
// when set (account=ghes repo=…): a run lists one hook's deliveries, never
// the whole source. The token and the base URL are left out, as Stripe's
// key and base URL are (see Stripe.scope).
func (g *GitHub) scope() string {
	var sc string
	if g.cfg.Account != "" {
		sc = "account=" + g.cfg.Account + " "
	}
	hook := " hook=" + strconv.FormatInt(g.cfg.HookID, 10)
	if g.cfg.Repo != "" {
		return sc + "repo=" + strings.ToLower(g.cfg.Repo) + hook
	}
	return sc + "org=" + strings.ToLower(g.cfg.Org) + hook
}

func (g *GitHub) auth(r *http.Request) {
	r.Header.Set("Authorization", "Bearer "+g.cfg.Token)
	r.Header.Set("Accept", "application/vnd.github+json")
	r.Header.Set("X-GitHub-Api-Version", "2022-11-28")
}

// githubKeptHeaders are the delivery's request headers stored with the
// event: what identifies it. Signatures are left out: they sign the bytes
// GitHub sent then, not the API's rendering of the payload.
var githubKeptHeaders = []string{"X-GitHub-Event", "X-GitHub-Delivery", "X-GitHub-Hook-ID",
	"X-GitHub-Hook-Installation-Target-ID", "X-GitHub-Hook-Installation-Target-Type"}

// list reads one page of the deliveries list: each delivery's guid, event
// and time; its request (headers, payload) is read by the item's load.
func (g *GitHub) list(ctx context.Context, c *client, cursor string) (page, error) {
	q := url.Values{"per_page": {"100"}}
	if cursor != "" {
		q.Set("cursor", cursor)
	}
	body, header, err := c.get(ctx, g.cfg.BaseURL+g.path+"?"+q.Encode())
	if err != nil {
		if statusCode(err) == http.StatusNotFound {
			// GitHub answers 404, not 403, to a token that may not read the
			// hook, as if it did not exist.
			return page{}, fmt.Errorf("%w (GitHub answers 404 also to a classic token without %s, or a fine-grained token without the Webhooks permission, as if the hook did not exist: check the token as well as the %s and the hook id)",
				err, g.adminScope(), g.owner())
		}
		return page{}, err
	}
	var list []struct {
		ID          int64     `json:"id"`
		GUID        string    `json:"guid"`
		Event       string    `json:"event"`
		DeliveredAt time.Time `json:"delivered_at"`
	}
	if err := json.Unmarshal(body, &list); err != nil {
		return page{}, fmt.Errorf("GET %s: the answer is not a list of deliveries", g.path)
	}
	var p page
	for _, d := range list {
		if d.GUID == "" || d.ID == 0 {
			return page{}, fmt.Errorf("GET %s: a delivery without id or guid", g.path)
		}
		id, guid, event, at := d.ID, d.GUID, d.Event, d.DeliveredAt
		p.Events = append(p.Events, item{ID: guid, Type: event, At: at,
			load: func(ctx context.Context, c *client) (item, error) {
				it, err := g.delivery(ctx, c, id, at)
				if err != nil {
					return item{}, err
				}
				it.ID = guid
				if it.Type == "" {
					it.Type = event
				}
				return it, nil
			}})
	}
	p.Next, err = nextCursor(header.Values("Link"))
	if err != nil {
		return page{}, fmt.Errorf("GET %s: %w", g.path, err)
	}
	return p, nil
}

// adminScope is the classic token scope that reads the hook's deliveries.
func (g *GitHub) adminScope() string {
	if g.cfg.Repo != "" {
		return "the admin:repo_hook scope"
	}
	return "the admin:org_hook scope"
}

// owner names what holds the hook: repository or organization.
func (g *GitHub) owner() string {
	if g.cfg.Repo != "" {
		return "repository"
	}
	return "organization"
}

// githubAgesOutAfter is how old a delivery must be for a 404 or 410 on its
// fetch to be read as its having aged out of GitHub's history (about 3
// days), with a day's margin for GitHub's own pace and the hosts' clocks.
const githubAgesOutAfter = 48 * time.Hour

// delivery fetches one delivery's request (delivered at deliveredAt, as the
// list said): its identifying headers and its payload, the bytes exactly as
// the API returned them.
func (g *GitHub) delivery(ctx context.Context, c *client, id int64, deliveredAt time.Time) (item, error) {
	path := g.path + "/" + strconv.FormatInt(id, 10)
	body, _, err := c.get(ctx, g.cfg.BaseURL+path)
	if err != nil {
		code := statusCode(err)
		if code != http.StatusNotFound && code != http.StatusGone {
			return item{}, err
		}
		if !deliveredAt.IsZero() && time.Since(deliveredAt) > githubAgesOutAfter {
			// Old enough to have aged out of GitHub's history between
			// the list and the fetch: a backfill reads the oldest, those
			// about to age out, last, and such a delivery stays listed
			// for a while, so stopping on it would stop every run
			// (review helper-296).
			return item{}, &goneError{delivery: id, err: err}
		}
		// Too recent to have aged out: GitHub answers 404 for a token or
		// App installation whose access changed, a hook re-created
		// meanwhile, or a passing fault. Taken for gone, the run would
		// end "done" with the deliveries still there (review helper-303):
		// it stops instead, its page's cursor unsaved, and the next run
		// reads the page again.
		return item{}, fmt.Errorf("%w (delivery %d, delivered %s, is too recent to have aged out of GitHub's ~3-day history: check that the token still reads the hook's deliveries, then run again)",
			err, id, deliveredAt.UTC().Format(time.RFC3339))
	}
	var d struct {
		Request struct {
			Headers map[string]string `json:"headers"`
			Payload json.RawMessage   `json:"payload"`
		} `json:"request"`
	}
	if err := json.Unmarshal(body, &d); err != nil {
		return item{}, fmt.Errorf("GET %s: the answer is not a delivery", path)
	}
	headers := map[string][]string{"Inlet-Backfill": {githubProvenance}}
	var typ string
	for name, v := range d.Request.Headers {
		canon := http.CanonicalHeaderKey(name)
		for _, keep := range githubKeptHeaders {
			if strings.EqualFold(name, keep) {
				headers[canon] = []string{v}
				if strings.EqualFold(keep, "X-GitHub-Event") {
					typ = v
				}
			}
		}
	}
	payload := bytes.TrimSpace(d.Request.Payload)
	if len(payload) == 0 || bytes.Equal(payload, []byte("null")) {
		return item{Skip: true}, nil
	}
	return item{Type: typ, Headers: headers, Body: []byte(payload)}, nil
}

// goneError is the error of a listed delivery whose fetch answered 404 Not
// Found or 410 Gone: GitHub no longer has it. Run and Reconcile count it
// skipped, log its id and go on; every other failure of a fetch still stops
// the run.
type goneError struct {
	delivery int64 // GitHub's id of the delivery (not X-GitHub-Delivery)
	err      error // the final 404 or 410
}

func (e *goneError) Error() string {
	return fmt.Sprintf("delivery %d is gone: %v", e.delivery, e.err)
}

func (e *goneError) Unwrap() error { return e.err }

// nextCursor is the cursor of the rel="next" link of a Link header, "" when
// there is none (the last page).
func nextCursor(links []string) (string, error) {
	for _, h := range links {
		for _, link := range strings.Split(h, ",") {
			target, params, _ := strings.Cut(strings.TrimSpace(link), ";")
			isNext := false
			for _, p := range strings.Split(params, ";") {
				k, v, _ := strings.Cut(strings.TrimSpace(p), "=")
				if strings.EqualFold(k, "rel") && strings.Contains(" "+strings.Trim(v, `"`)+" ", " next ") {
					isNext = true
				}
			}
			if !isNext {
				continue
			}
			u, err := url.Parse(strings.Trim(strings.TrimSpace(target), "<>"))
			if err != nil {
				return "", fmt.Errorf("unreadable next link: %w", err)
			}
			cur := u.Query().Get("cursor")
			if cur == "" {
				return "", errors.New("next link without a cursor")
			}
			return cur, nil
		}
	}
	return "", nil
}
