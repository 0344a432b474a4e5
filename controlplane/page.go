package controlplane

import (
	"context"
	"embed"
	"html/template"
	"log/slog"
	"net/http"
	"time"
)

//go:embed templates/*.html
var templateFS embed.FS

var pageTemplate = template.Must(template.New("tenant.html").Funcs(template.FuncMap{
	"ms": func(v float64) string {
		return time.Duration(v * float64(time.Millisecond)).Round(10 * time.Microsecond).String()
	},
}).ParseFS(templateFS, "templates/tenant.html"))

// Count is one row of a table on the page.
type Count struct {
	Key   string
	Count int64
}

// Stats is what a tenant's page shows.
type Stats struct {
	Tenant string
	// Jobs counts jobs by the outcome of their latest attempt.
	Jobs []Count
	// Failures counts attempts by error class.
	Failures []Count
	// Attempts is the number of real attempts (replays excluded), and P50,
	// P90, P99 their duration percentiles in milliseconds.
	Attempts      int64
	P50, P90, P99 float64
	// LastReport is when the latest record arrived; zero for none.
	LastReport time.Time
}

// TenantStats reads tenant's page figures.
func (s *Server) TenantStats(ctx context.Context, tenant string) (Stats, error) {
	st := Stats{Tenant: tenant}
	var err error
	if st.Jobs, err = s.counts(ctx, "JobsByStatus", tenant); err != nil {
		return st, err
	}
	if st.Failures, err = s.counts(ctx, "FailureClasses", tenant); err != nil {
		return st, err
	}
	var last *time.Time
	if err := s.pool.QueryRow(ctx, query("DurationPercentiles"), tenant).Scan(&st.Attempts, &st.P50, &st.P90, &st.P99, &last); err != nil {
		return st, err
	}
	if last != nil {
		st.LastReport = last.UTC()
	}
	return st, nil
}

func (s *Server) counts(ctx context.Context, name, tenant string) ([]Count, error) {
	rows, err := s.pool.Query(ctx, query(name), tenant)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Count
	for rows.Next() {
		var c Count
		if err := rows.Scan(&c.Key, &c.Count); err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, rows.Err()
}

func (s *Server) page(w http.ResponseWriter, r *http.Request, tenant string) {
	st, err := s.TenantStats(r.Context(), tenant)
	if err != nil {
		s.log.Error("tenant page", slog.String("tenant", tenant), slog.String("error", err.Error()))
		http.Error(w, "could not read the figures; try again", http.StatusServiceUnavailable)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; form-action 'none'; frame-ancestors 'none'; base-uri 'none'")
	w.Header().Set("Referrer-Policy", "no-referrer")
	if err := pageTemplate.Execute(w, st); err != nil {
		s.log.Error("render tenant page", slog.String("tenant", tenant), slog.String("error", err.Error()))
	}
}
