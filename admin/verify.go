package admin

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/ingress/verify"
	"github.com/inlet-dev/inlet/schema/queries"
)

// Sources are the configured sources' verifier settings by source name
// (events.provider), as in the configuration file.
type Sources map[string]verify.Config

// VerifyRequest selects the events to re-verify: one event (ID), or every
// event received since Since (and before Until, if set), optionally of one
// source.
type VerifyRequest struct {
	ID           int64
	Since, Until time.Time
	Provider     string
}

// VerifyReport is the outcome of [Reverify].
type VerifyReport struct {
	// Checked is how many events were looked at; Verified + Failed.
	Checked  int `json:"checked"`
	Verified int `json:"verified"`
	Failed   int `json:"failed"`
	// Failures lists the events that no longer verify, oldest first, at most
	// maxFailures of them (Failed counts them all).
	Failures []VerifyFailure `json:"failures"`
}

// VerifyFailure is one stored event that no longer verifies.
type VerifyFailure struct {
	EventID         int64  `json:"event_id"`
	Provider        string `json:"provider"`
	ExternalEventID string `json:"external_event_id"`
	// Reason is a stable label: "source_not_configured",
	// "source_config_invalid", "scheme_changed", a verifier reason
	// ("signature_mismatch", "signature_missing", "signature_malformed",
	// "malformed_payload"), "event_id_changed" or "event_type_changed".
	Reason string `json:"reason"`
	// Detail says more, for people. It never holds a secret.
	Detail string `json:"detail"`
}

// maxFailures bounds the failures a report lists.
const maxFailures = 1000

// Reverify recomputes the signatures of the events req selects from their
// stored bytes, headers and request URI with the secrets of their source in
// sources, ignoring the timestamp tolerance (a stored event is old by nature),
// and reports the ones that no longer verify: a changed body, header or
// secret, a source missing from the configuration or of another type now, or
// a verified id or type that differs from the stored one.
//
// Limits: the URL a sender signed is not stored whole, only its path and
// query (request_uri). It is rebuilt as the source's public_url (plus the
// stored query) when set, else as "http://localhost" + request_uri. Only a
// source whose signature covers the URL (twilio, hubspot, square, an hmac
// template with {url}: verify.SignsURL) and has no public_url, whose
// webhooks did not arrive at http://localhost, cannot be re-verified: its
// events report signature_mismatch with a detail saying why. A source whose
// secrets were rotated out since verifies with the secrets configured now;
// keep a retired secret listed to re-verify older events.
//
// Events stored without a signature (signature_verified false: backfilled,
// reconciled) have none to re-check and are left out of a time range. One
// asked for by id is ErrConflict, saying so (the API's 409); an id that is
// not stored is ErrNotFound.
func Reverify(ctx context.Context, db DB, sources Sources, req VerifyRequest) (VerifyReport, error) {
	if err := checkText("source", req.Provider); err != nil {
		return VerifyReport{}, err
	}
	switch {
	case req.ID < 0:
		return VerifyReport{}, invalid("event id %d: must be positive", req.ID)
	case req.ID > 0 && (!req.Since.IsZero() || !req.Until.IsZero() || req.Provider != ""):
		return VerifyReport{}, invalid("give one event id, or a time range, not both")
	case req.ID == 0 && req.Since.IsZero():
		return VerifyReport{}, invalid("give an event id, or since: the start of the time range to re-verify")
	}
	if err := checkRange(req.Since, req.Until); err != nil {
		return VerifyReport{}, err
	}
	rep := VerifyReport{Failures: []VerifyFailure{}}
	unsigned := false // the event asked for by id is stored, without a signature
	v := reverifier{sources: sources, bad: map[string]error{}}
	err := readTx(ctx, db, func(tx pgx.Tx) error {
		var after int64
		for {
			// A page is cut by bytes as well as rows (batchBytes): its
			// bodies are held together.
			rows, err := queries.New(tx).AdminEventsToVerify(ctx, queries.AdminEventsToVerifyParams{EventID: req.ID,
				Provider: req.Provider, Since: nullTime(req.Since), Until: nullTime(req.Until), AfterID: after,
				BatchSize: batchSize, BatchBytes: batchBytes})
			if err != nil {
				return err
			}
			batch := make([]storedEvent, len(rows))
			for i, r := range rows {
				batch[i] = storedEvent{id: r.ID, provider: r.Provider, scheme: r.Scheme, externalID: r.ExternalEventID,
					eventType: r.EventType, requestURI: r.RequestUri, body: r.RawBody}
				if err := json.Unmarshal(r.Headers, &batch[i].headers); err != nil {
					return fmt.Errorf("headers of event %d: %w", r.ID, err)
				}
			}
			for i := range batch {
				rep.Checked++
				f, ok := v.check(&batch[i])
				if ok {
					rep.Verified++
					continue
				}
				rep.Failed++
				if len(rep.Failures) < maxFailures {
					rep.Failures = append(rep.Failures, f)
				}
			}
			if len(rows) == 0 || lastPage(len(rows), rows[0].PageRows) {
				break
			}
			after = batch[len(batch)-1].id
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		if req.ID > 0 && rep.Checked == 0 {
			var err error
			if unsigned, err = storedUnsigned(ctx, tx, req.ID); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return VerifyReport{}, fmt.Errorf("re-verify events: %w", err)
	}
	if req.ID > 0 && rep.Checked == 0 {
		if unsigned {
			return VerifyReport{}, fmt.Errorf("re-verify event %d: %w", req.ID,
				conflict("stored without a signature (backfilled or reconciled): nothing to re-verify"))
		}
		return VerifyReport{}, fmt.Errorf("re-verify event %d: %w", req.ID, notFound("no such event"))
	}
	return rep, nil
}

// storedUnsigned reports whether event id is stored with signature_verified
// false (backfilled from the provider's API, or stored by reconcile), which
// AdminEventsToVerify leaves out: there is no signature to re-check. Asked
// for alone, an event it did not select is either that or missing, and only
// a missing one is "no such event".
func storedUnsigned(ctx context.Context, tx pgx.Tx, id int64) (bool, error) {
	unsigned, err := queries.New(tx).AdminEventUnsigned(ctx, id)
	if err != nil {
		return false, fmt.Errorf("look up event %d: %w", id, err)
	}
	return unsigned, nil
}

type storedEvent struct {
	id                                                  int64
	provider, scheme, externalID, eventType, requestURI string
	headers                                             map[string][]string
	body                                                []byte
}

type reverifier struct {
	sources Sources
	bad     map[string]error // source name → its configuration error, checked once
}

func (v *reverifier) check(e *storedEvent) (VerifyFailure, bool) {
	fail := func(reason, detail string) (VerifyFailure, bool) {
		return VerifyFailure{EventID: e.id, Provider: e.provider, ExternalEventID: e.externalID, Reason: reason, Detail: detail}, false
	}
	cfg, ok := v.sources[e.provider]
	if !ok {
		return fail("source_not_configured", fmt.Sprintf("no source named %q in the configuration", e.provider))
	}
	bad, seen := v.bad[e.provider]
	if !seen {
		_, bad = verify.New(cfg)
		v.bad[e.provider] = bad
	}
	if bad != nil {
		return fail("source_config_invalid", fmt.Sprintf("source %q: %v", e.provider, bad))
	}
	if canonicalScheme(cfg.Type) != canonicalScheme(e.scheme) {
		return fail("scheme_changed", fmt.Sprintf("stored as %s, source %q is of type %s now", e.scheme, e.provider, cfg.Type))
	}
	res, err := verify.Reverify(cfg, http.Header(e.headers), e.body, requestURL(cfg, e.requestURI))
	if err != nil {
		detail := err.Error()
		if verify.SignsURL(cfg) && cfg.PublicURL == "" {
			detail += fmt.Sprintf(" (%s signs the URL it called and only its path and query are stored: set public_url to re-verify)", cfg.Type)
		}
		return fail(verify.Reason(err), detail)
	}
	if res.EventID != e.externalID && !verify.PerDeliveryID(cfg) &&
		!slices.Contains(verify.FormerEventIDs(cfg, http.Header(e.headers), e.body), e.externalID) {
		return fail("event_id_changed", fmt.Sprintf("verifies, but with event id %q, not the stored one", res.EventID))
	}
	if res.EventType != e.eventType {
		return fail("event_type_changed", fmt.Sprintf("verifies, but with event type %q, not the stored %q", res.EventType, e.eventType))
	}
	return VerifyFailure{}, true
}

// requestURL rebuilds the URL a sender signed from what is stored (see
// Reverify's limits).
func requestURL(cfg verify.Config, requestURI string) string {
	if cfg.PublicURL != "" {
		base, _, _ := strings.Cut(cfg.PublicURL, "#")
		if _, query, ok := strings.Cut(requestURI, "?"); ok {
			return base + "?" + query
		}
		return base
	}
	return "http://localhost" + requestURI
}

func canonicalScheme(s string) string {
	if s == "svix" {
		return "standard-webhooks"
	}
	return s
}
