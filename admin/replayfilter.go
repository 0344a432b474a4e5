package admin

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/filter"
	"github.com/inlet-dev/inlet/schema/queries"
)

// handlerFilter is one of a handler's enabled subscriptions with a filter.
type handlerFilter struct {
	id              int64
	provider, etype *regexp.Regexp
	f               *filter.Filter
}

// handlerFilters compiles handler's filtered subscriptions. One that does
// not compile (a row written by hand: consumers compile theirs before
// registering) fails the replay with its id, rather than silently skipping
// its events.
func handlerFilters(ctx context.Context, tx pgx.Tx, handler string) ([]handlerFilter, error) {
	rows, err := queries.New(tx).AdminHandlerFilters(ctx, handler)
	if err != nil {
		return nil, err
	}
	var out []handlerFilter
	for _, r := range rows {
		var expr string
		if r.Filter != nil { // always: the query reads only rows with a filter
			expr = *r.Filter
		}
		f, err := filter.Compile(expr)
		if err != nil {
			return nil, invalid("subscription %d of handler %q: %v", r.ID, handler, err)
		}
		out = append(out, handlerFilter{id: r.ID, provider: filter.Pattern(r.ProviderPattern), etype: filter.Pattern(r.EventTypePattern), f: f})
	}
	return out, nil
}

// missingFiltered finds the events req selects that have no job of its
// handler (with req.Unrouted: none made when they arrived) and pass one of the handler's
// filtered subscriptions (evaluated here, as ingress does at arrival), and
// with create makes their jobs. Events skip reports (by source and type) are
// left out: a plan's, counted already as the unfiltered subscriptions' (nil:
// none).
// Returns how many.
func missingFiltered(ctx context.Context, tx pgx.Tx, req ReplayRequest, create bool, skip func(provider, eventType string) bool) (int, error) {
	fs, err := handlerFilters(ctx, tx, req.Handler)
	if err != nil || len(fs) == 0 {
		return 0, err
	}
	like := globLike(req.EventType)
	since, until := nullTime(req.Since), nullTime(req.Until)
	total := 0
	q := queries.New(tx)
	for after := int64(0); ; {
		rows, err := q.AdminMissingFilteredCandidates(ctx, queries.AdminMissingFilteredCandidatesParams{
			Handler: req.Handler, Provider: req.Provider, EventTypeLike: like, Since: since, Until: until,
			AfterID: after, BatchSize: batchSize, BatchBytes: batchBytes, MaxPayload: filter.MaxPayload, Unrouted: req.Unrouted})
		if err != nil {
			return total, err
		}
		var (
			ids      []int64 // an event per filtered subscription it passed
			received []time.Time
			subs     []int64
			events   int // events that passed one
		)
		for _, r := range rows {
			after = r.ID
			if skip != nil && skip(r.Provider, r.EventType) {
				continue
			}
			var headers map[string][]string
			if err := json.Unmarshal(r.Headers, &headers); err != nil {
				return total, fmt.Errorf("headers of event %d: %w", r.ID, err)
			}
			id, at, provider, etype, body := r.ID, r.ReceivedAt, r.Provider, r.EventType, r.RawBody
			ev := filter.Event{Source: provider, Type: etype, Headers: headers, OccurredAt: r.OccurredAt}
			ev.Payload = filter.ParsePayload(body) // as ingress does at arrival; a body over MaxPayload is read as nil
			passed := false
			for _, f := range fs {
				if !f.provider.MatchString(provider) || !f.etype.MatchString(etype) {
					continue
				}
				ok, err := f.f.MatchContext(ctx, ev)
				if ctx.Err() != nil {
					return total, err
				}
				if ok {
					// The SQL takes the settings of the subscriptions that
					// passed (and the unfiltered ones), as at fan-out.
					ids, received, subs = append(ids, id), append(received, at), append(subs, f.id)
					passed = true
				}
			}
			if passed {
				events++
			}
		}
		if create && len(ids) > 0 {
			n, err := q.AdminCreateFilteredJobs(ctx, queries.AdminCreateFilteredJobsParams{
				Handler: req.Handler, EventIds: ids, ReceivedAts: received, SubscriptionIds: subs})
			if err != nil {
				return total, err
			}
			total += int(n)
		} else {
			total += events
		}
		if len(rows) == 0 || lastPage(len(rows), rows[0].PageRows) {
			return total, nil
		}
	}
}
