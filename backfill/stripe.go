package backfill

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// StripeConfig selects the Stripe events to backfill.
type StripeConfig struct {
	// APIKey is the secret (or restricted, events:read) API key. Required;
	// never logged or stored.
	APIKey string
	// BaseURL is the API's origin. Defaults to https://api.stripe.com.
	BaseURL string
	// Since keeps events created at or after it (created[gte]). Stripe keeps
	// the events of the last 30 days. Zero: all of them.
	Since time.Time
	// SinceAsGiven is Since as the operator wrote it when it counts back
	// from the clock (7d, 24h): the query is known by it, so running the
	// same command again resumes, and the resumed run asks for the Since the
	// first run resolved (kept in the state file), not one moved on.
	SinceAsGiven string
	// Until keeps events created at or before it (created[lte]). Zero: up to
	// the newest.
	Until time.Time
	// Types keeps only these event types (types[]; at most 20, "invoice.*"
	// wildcards allowed by Stripe). Empty: every type.
	Types []string
	// Account is the operator's label of the account APIKey lists (us, eu,
	// test), never sent to Stripe: where several reconcile entries of one
	// source list different accounts, a run's scope names it (account=us),
	// so its window counts as compared for that account only. Empty: no
	// label. See CheckAccount for its form.
	Account string
}

// StripeRetention is how long Stripe keeps events listable: 30 days.
const StripeRetention = 30 * 24 * time.Hour

// Stripe lists Stripe's GET /v1/events, newest first, 100 a page, paging
// with starting_after while has_more.
type Stripe struct{ cfg StripeConfig }

// stripeProvenance is the Inlet-Backfill header of events from Stripe.
const stripeProvenance = "stripe-events-api"

// NewStripe returns a Lister over Stripe's events API.
func NewStripe(cfg StripeConfig) (*Stripe, error) {
	if cfg.APIKey == "" {
		return nil, errors.New("stripe backfill: an API key is required")
	}
	if len(cfg.Types) > 20 {
		return nil, fmt.Errorf("stripe backfill: at most 20 types, got %d", len(cfg.Types))
	}
	if err := CheckAccount(cfg.Account); err != nil {
		return nil, fmt.Errorf("stripe backfill: %w", err)
	}
	if cfg.BaseURL == "" {
		cfg.BaseURL = "https://api.stripe.com"
	}
	cfg.BaseURL = strings.TrimRight(cfg.BaseURL, "/")
	return &Stripe{cfg: cfg}, nil
}

// key is the query: base URL, the key's mode (a cursor is an event id of
// one mode: a test-mode cursor resumed with a live key, or the reverse, is
// refused by Stripe on every run), since, until and scope. The key itself is
// left out (see scope).
func (s *Stripe) key() string {
	k := "stripe " + s.cfg.BaseURL
	if m := stripeMode(s.cfg.APIKey); m != "" {
		k += " mode=" + m
	}
	switch {
	case s.cfg.SinceAsGiven != "":
		k += " since=" + s.cfg.SinceAsGiven
	case !s.cfg.Since.IsZero():
		k += " since=" + strconv.FormatInt(s.cfg.Since.Unix(), 10)
	}
	if !s.cfg.Until.IsZero() {
		k += " until=" + strconv.FormatInt(s.cfg.Until.Unix(), 10)
	}
	if sc := s.scope(); sc != "" {
		k += " " + sc
	}
	return k
}

// stripeMode is the mode a Stripe API key's prefix names (sk_test_,
// rk_test_: "test"; sk_live_, rk_live_: "live"), "" for a key of another
// form. Nothing past the prefix is read.
func stripeMode(apiKey string) string {
	for _, kind := range []string{"sk_", "rk_"} {
		for _, mode := range []string{"test", "live"} {
			if strings.HasPrefix(apiKey, kind+mode+"_") {
				return mode
			}
		}
	}
	return ""
}

// scope is the account label and the types listed, sorted and without
// repeats (--types a,b and b,a list the same events): account=us
// types=a,b, account=us, types=a,b; "" with neither: every event of the
// source. The API key is left out (a rotated key, the usual end of an
// outage, lists the same account, and would start a scope with no
// coverage), and so is the base URL (how the API is reached, not what it
// lists: a proxy put in front would do the same); the account label tells
// apart the accounts an entry's key or endpoint selects.
func (s *Stripe) scope() string {
	var parts []string
	if s.cfg.Account != "" {
		parts = append(parts, "account="+s.cfg.Account)
	}
	if len(s.cfg.Types) > 0 {
		parts = append(parts, "types="+typesKey(s.cfg.Types))
	}
	return strings.Join(parts, " ")
}

// typesKey is Stripe types as a scope names them: sorted, without repeats,
// comma-separated ("" for none), so a,b and b,a are one listing.
func typesKey(types []string) string {
	return strings.Join(slices.Compact(slices.Sorted(slices.Values(types))), ",")
}

// window is the events' time the query asks for (created[gte], [lte]).
func (s *Stripe) window() (since, until time.Time) { return s.cfg.Since, s.cfg.Until }

// pinned is the Since a relative --since resolved to, kept in the state
// file; "" when the query has no time from the clock.
func (s *Stripe) pinned() string {
	if s.cfg.SinceAsGiven == "" {
		return ""
	}
	return strconv.FormatInt(s.cfg.Since.Unix(), 10)
}

// pin takes back the Since a run resumed from resolved.
func (s *Stripe) pin(v string) error {
	sec, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return fmt.Errorf("pinned since %q is not a unix time", v)
	}
	s.cfg.Since = time.Unix(sec, 0)
	return nil
}

func (s *Stripe) auth(r *http.Request) {
	r.Header.Set("Authorization", "Bearer "+s.cfg.APIKey)
}

// list reads one page of events; a Stripe list carries each event whole
// (no item has load set).
func (s *Stripe) list(ctx context.Context, c *client, cursor string) (page, error) {
	q := url.Values{"limit": {"100"}}
	if cursor != "" {
		q.Set("starting_after", cursor)
	}
	if !s.cfg.Since.IsZero() {
		q.Set("created[gte]", strconv.FormatInt(s.cfg.Since.Unix(), 10))
	}
	if !s.cfg.Until.IsZero() {
		q.Set("created[lte]", strconv.FormatInt(s.cfg.Until.Unix(), 10))
	}
	for _, t := range s.cfg.Types {
		q.Add("types[]", t)
	}
	body, _, err := c.get(ctx, s.cfg.BaseURL+"/v1/events?"+q.Encode())
	if err != nil {
		return page{}, err
	}
	// RawMessage keeps each event's bytes exactly as Stripe sent them.
	var list struct {
		Object  string            `json:"object"`
		Data    []json.RawMessage `json:"data"`
		HasMore bool              `json:"has_more"`
	}
	if err := json.Unmarshal(body, &list); err != nil || list.Object != "list" {
		return page{}, errors.New("GET /v1/events: the answer is not a Stripe list object")
	}
	var p page
	for i, raw := range list.Data {
		var ev struct {
			ID      string `json:"id"`
			Type    string `json:"type"`
			Created int64  `json:"created"`
		}
		if err := json.Unmarshal(raw, &ev); err != nil || ev.ID == "" {
			return page{}, fmt.Errorf("GET /v1/events: element %d of data is not an event with an id", i)
		}
		p.Events = append(p.Events, item{
			ID:      ev.ID,
			Type:    ev.Type,
			Headers: map[string][]string{"Inlet-Backfill": {stripeProvenance}},
			Body:    []byte(raw),
			At:      unixTime(ev.Created),
		})
	}
	if list.HasMore {
		if len(p.Events) == 0 {
			return page{}, errors.New("GET /v1/events: has_more on an empty page")
		}
		p.Next = p.Events[len(p.Events)-1].ID
	}
	return p, nil
}

// unixTime is the time of Unix seconds s; zero for 0 (not given).
func unixTime(s int64) time.Time {
	if s == 0 {
		return time.Time{}
	}
	return time.Unix(s, 0).UTC()
}
