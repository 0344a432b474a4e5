package dashboard

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/inlet-dev/inlet/admin"
	"github.com/inlet-dev/inlet/internal/database"
)

// Prefix is the path the dashboard is served under.
const Prefix = "/dashboard/"

// Config configures the dashboard.
type Config struct {
	// DB is a pool connected as webhook_operator (the admin API's). Required.
	DB admin.DB
	// Token is the admin token (admin.token): what the login form and a
	// bearer header are checked against. Required, at least
	// admin.MinTokenBytes.
	Token string
	// Sources are the configured source names, in the order to show them.
	// Sources with events in the plotted window are shown too.
	Sources []string
	// Silence flags silent sources in the source activity table. Defaults
	// to nil: the last event of each source is read from the database and
	// none is flagged.
	Silence Silence
	// MaxTypesPerSource is the cap event types are folded with before the
	// overview lists the unrouted ones (silence.max_types_per_source).
	// Defaults to 100.
	MaxTypesPerSource int
	// Logger defaults to slog.Default(). The dashboard logs failures and
	// replays; never a token, a cookie, a body or a header value. (Package
	// admin logs each request.)
	Logger *slog.Logger
	// Now is the clock of the plotted window, lags and ages. Defaults to
	// time.Now.
	Now func() time.Time
	// RequestTimeout bounds one page's database work. Defaults to 30s.
	RequestTimeout time.Duration
	// AuthLimiter limits wrong tokens (login form and bearer header) per
	// client address: past its budget a client gets 429 with Retry-After.
	// Pass the admin API's (APIConfig.AuthLimiter) so both share one budget.
	// Defaults to a limiter of its own with admin.AuthLimit's defaults (10
	// wrong tokens, then one more try every 6s) on Now.
	AuthLimiter *admin.AuthLimiter
	// SessionTTL is how long a login lasts. Defaults to 12h.
	SessionTTL time.Duration
	// Window is the span of the event-rate plot. Defaults to 24h.
	Window time.Duration
	// Bucket is the width of one point of the plot; Window is rounded up to
	// whole buckets. Defaults to 1h.
	Bucket time.Duration
}

// WithDefaults returns c with every unset field at its default.
func (c Config) WithDefaults() Config {
	c.Logger = cmp.Or(c.Logger, slog.Default())
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.AuthLimiter == nil {
		c.AuthLimiter = admin.NewAuthLimiter(admin.AuthLimit{Now: c.Now})
	}
	c.RequestTimeout = cmp.Or(c.RequestTimeout, 30*time.Second)
	c.SessionTTL = cmp.Or(c.SessionTTL, 12*time.Hour)
	c.Window = cmp.Or(c.Window, 24*time.Hour)
	c.Bucket = cmp.Or(c.Bucket, time.Hour)
	c.MaxTypesPerSource = cmp.Or(c.MaxTypesPerSource, 100)
	return c
}

// maxBuckets bounds the points of one plot series.
const maxBuckets = 1000

func (c Config) validate() error {
	switch {
	case c.DB == nil:
		return errors.New("dashboard: DB: no database")
	case len(c.Token) < admin.MinTokenBytes:
		return fmt.Errorf("dashboard: Token: at least %d bytes required", admin.MinTokenBytes)
	case c.RequestTimeout < 0, c.SessionTTL < 0:
		return errors.New("dashboard: RequestTimeout and SessionTTL must not be negative")
	case c.Bucket < time.Second || c.Bucket%time.Second != 0:
		return fmt.Errorf("dashboard: Bucket %s: must be whole seconds", c.Bucket)
	case c.Window < c.Bucket || (c.Window+c.Bucket-1)/c.Bucket > maxBuckets:
		return fmt.Errorf("dashboard: Window %s: must hold between 1 and %d buckets of %s", c.Window, maxBuckets, c.Bucket)
	}
	return nil
}

// Dashboard is the dashboard's http.Handler, for paths under [Prefix].
type Dashboard struct {
	cfg      Config
	token    [sha256.Size]byte
	sessions *sessions
	pages    map[string]*template.Template
	static   fs.FS
	mux      *http.ServeMux
}

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// New checks cfg and returns the dashboard.
func New(cfg Config) (*Dashboard, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	pages, err := parsePages()
	if err != nil {
		return nil, err
	}
	sess, err := newSessions(cfg.SessionTTL, cfg.Now)
	if err != nil {
		return nil, err
	}
	static, _ := fs.Sub(staticFS, "static")
	d := &Dashboard{cfg: cfg, token: sha256.Sum256([]byte(cfg.Token)), sessions: sess, pages: pages, static: static}

	mux := http.NewServeMux()
	mux.HandleFunc("GET /dashboard/login", d.loginForm)
	mux.HandleFunc("POST /dashboard/login", d.login)
	// The stylesheet alone (no directory listing); the login page needs it
	// before any session.
	mux.HandleFunc("GET /dashboard/static/dashboard.css", func(w http.ResponseWriter, r *http.Request) {
		http.ServeFileFS(w, r, d.static, "dashboard.css")
	})
	mux.Handle("GET /dashboard/{$}", d.authenticated(d.overview))
	mux.Handle("GET /dashboard/events", d.authenticated(d.events))
	mux.Handle("GET /dashboard/events/{id}", d.authenticated(d.event))
	mux.Handle("GET /dashboard/audit", d.authenticated(d.auditPage))
	mux.Handle("POST /dashboard/replay", d.authenticated(d.replay))
	mux.Handle("POST /dashboard/logout", d.authenticated(d.logout))
	mux.Handle("/dashboard/", d.authenticated(func(w http.ResponseWriter, r *http.Request, s *session) {
		d.fail(w, r, s, http.StatusNotFound, "No such page.")
	}))
	d.mux = mux
	return d, nil
}

// ServeHTTP serves the dashboard, with its security headers on every
// response.
func (d *Dashboard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	// No script may run at all, whatever a stored body contains; the only
	// resource is our stylesheet; forms post only to us; no one frames us.
	h.Set("Content-Security-Policy", "default-src 'none'; style-src 'self'; img-src 'self' data:; "+
		"form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	// Same-origin Referers are what the CSRF check reads when a browser
	// sends no Origin.
	h.Set("Referrer-Policy", "same-origin")
	h.Set("Cache-Control", "no-store")
	if r.URL.Path == "/dashboard" {
		http.Redirect(w, r, Prefix, http.StatusMovedPermanently)
		return
	}
	d.mux.ServeHTTP(w, r)
}

func (d *Dashboard) context(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), d.cfg.RequestTimeout)
}

// page is what every template gets.
type page struct {
	Title string
	// CSRF is the session's form token; empty on the login page and for
	// bearer requests (which need none).
	CSRF string
	// Flash is a one-time message (a replay's outcome).
	Flash *flash
	// Nav shows the navigation (any authenticated request); LoggedIn the
	// logout button (a cookie session).
	Nav, LoggedIn bool
	Now           time.Time
	Data          any
}

// render writes the named page with status code. It renders into a buffer
// first, so a template error becomes a 500 rather than half a page.
func (d *Dashboard) render(w http.ResponseWriter, r *http.Request, s *session, code int, name, title string, data any) {
	p := page{Title: title, Data: data, Now: d.cfg.Now().UTC(), Nav: s != nil}
	if s != nil {
		p.CSRF = d.sessions.csrf(s)
		p.Flash = d.sessions.takeFlash(s)
		p.LoggedIn = !s.bearer
	}
	var buf bytes.Buffer
	if err := d.pages[name].ExecuteTemplate(&buf, "layout", p); err != nil {
		d.cfg.Logger.Error("dashboard render", slog.String("page", name), slog.String("error", err.Error()))
		http.Error(w, "internal error rendering the page", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Content-Length", strconv.Itoa(buf.Len()))
	w.WriteHeader(code)
	_, _ = w.Write(buf.Bytes())
}

// errorPage is the data of the error template.
type errorPage struct {
	Code    int
	Status  string
	Message string
}

// fail answers with an error page.
func (d *Dashboard) fail(w http.ResponseWriter, r *http.Request, s *session, code int, msg string) {
	if code == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", "5")
	}
	d.render(w, r, s, code, "error", http.StatusText(code), errorPage{Code: code, Status: http.StatusText(code), Message: msg})
}

// failErr answers with the error page err calls for: 404 for an unknown
// id, 400 for a bad request, 409 for a refused one, 503 when the database is
// unavailable, 500 otherwise (logged).
func (d *Dashboard) failErr(w http.ResponseWriter, r *http.Request, s *session, err error) {
	code := statusOf(err)
	msg := err.Error()
	switch code {
	case http.StatusServiceUnavailable:
		d.cfg.Logger.Warn("dashboard: database unavailable", slog.String("route", r.Pattern), slog.String("error", err.Error()))
		msg = "The database is unavailable; try again in a moment."
	case http.StatusInternalServerError:
		d.cfg.Logger.Error("dashboard request failed", slog.String("route", r.Pattern), slog.String("error", err.Error()))
	}
	d.fail(w, r, s, code, msg)
}

func statusOf(err error) int {
	switch {
	case errors.Is(err, admin.ErrNotFound):
		return http.StatusNotFound
	case errors.Is(err, admin.ErrInvalid):
		return http.StatusBadRequest
	case errors.Is(err, admin.ErrConflict):
		return http.StatusConflict
	case database.IsUnavailable(err):
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}
