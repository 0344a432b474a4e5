package admin

import (
	"context"
	"encoding/json"
	"regexp"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inlet-dev/inlet/filter"
	"github.com/inlet-dev/inlet/schema"
)

// handlerFilter is one of a handler's enabled subscriptions with a filter.
type handlerFilter struct {
	provider, etype *regexp.Regexp
	f               *filter.Filter
	maxAttempts     int32
}

// handlerFilters compiles handler's filtered subscriptions. One that does
// not compile (a row written by hand: consumers compile theirs before
// registering) fails the replay with its id, rather than silently skipping
// its events.
func handlerFilters(ctx context.Context, tx pgx.Tx, handler string) ([]handlerFilter, error) {
	rows, err := tx.Query(ctx, schema.Query("AdminHandlerFilters"), handler)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []handlerFilter
	for rows.Next() {
		var (
			id                    int64
			provider, etype, expr string
			maxAttempts           int32
		)
		if err := rows.Scan(&id, &provider, &etype, &expr, &maxAttempts); err != nil {
			return nil, err
		}
		f, err := filter.Compile(expr)
		if err != nil {
			return nil, invalid("subscription %d of handler %q: %v", id, handler, err)
		}
		out = append(out, handlerFilter{provider: filter.Pattern(provider), etype: filter.Pattern(etype), f: f, maxAttempts: maxAttempts})
	}
	return out, rows.Err()
}

// missingFiltered finds the events req selects that have no job of its
// handler (with req.Unrouted: no job at all) and pass one of the handler's
// filtered subscriptions (evaluated here, as ingress does at arrival), and
// with create makes their jobs.
// Returns how many.
func missingFiltered(ctx context.Context, tx pgx.Tx, req ReplayRequest, create bool) (int, error) {
	fs, err := handlerFilters(ctx, tx, req.Handler)
	if err != nil || len(fs) == 0 {
		return 0, err
	}
	like := globLike(req.EventType)
	since, until := nullTime(req.Since), nullTime(req.Until)
	total := 0
	for after := int64(0); ; {
		rows, err := tx.Query(ctx, schema.Query("AdminMissingFilteredCandidates"),
			req.Handler, req.Provider, like, since, until, after, batchSize, req.Unrouted)
		if err != nil {
			return total, err
		}
		var (
			ids      []int64
			received []time.Time
			attempts []int32
			seen     int
		)
		for rows.Next() {
			var (
				id       int64
				at       time.Time
				provider string
				etype    string
				headers  map[string][]string
				body     []byte
				occurred *time.Time
			)
			if err := rows.Scan(&id, &at, &provider, &etype, &headers, &body, &occurred); err != nil {
				rows.Close()
				return total, err
			}
			seen++
			after = id
			ev := filter.Event{Source: provider, Type: etype, Headers: headers, OccurredAt: occurred}
			var payload any
			if json.Unmarshal(body, &payload) == nil {
				ev.Payload = payload
			}
			var best int32
			for _, f := range fs {
				if !f.provider.MatchString(provider) || !f.etype.MatchString(etype) {
					continue
				}
				if ok, _ := f.f.Match(ev); ok {
					best = max(best, f.maxAttempts)
				}
			}
			if best > 0 {
				ids, received, attempts = append(ids, id), append(received, at), append(attempts, best)
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return total, err
		}
		if create && len(ids) > 0 {
			var n int
			if err := tx.QueryRow(ctx, schema.Query("AdminCreateFilteredJobs"), req.Handler, ids, received, attempts).Scan(&n); err != nil {
				return total, err
			}
			total += n
		} else {
			total += len(ids)
		}
		if seen < batchSize {
			return total, nil
		}
	}
}
