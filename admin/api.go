package admin

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/url"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/inlet-dev/inlet/internal/database"
	"github.com/inlet-dev/inlet/internal/httpserve"
)

// MinTokenBytes is the shortest bearer token the API accepts.
const MinTokenBytes = 16

// APIConfig configures the admin HTTP API.
type APIConfig struct {
	// Listen is the address of its own listener (never the webhook port).
	// Required for Start.
	Listen string
	// Token is the bearer token every request must carry
	// (Authorization: Bearer <token>). Required, at least MinTokenBytes.
	Token string
	// DB is a pool connected as webhook_operator. Required.
	DB DB
	// Sources are the configured sources, for re-verification.
	Sources Sources
	// Logger defaults to slog.Default(). Request lines carry method, route,
	// status and duration; never a token, a body or a header value.
	Logger *slog.Logger
	// Now is the clock of relative time bounds ("24h"). Defaults to time.Now.
	Now func() time.Time
	// RequestTimeout bounds one request's database work: past it the
	// request's statement is cancelled in PostgreSQL and the request is
	// answered 503 once it has stopped (see cancelWait). Defaults to 60s.
	RequestTimeout time.Duration
	// AuthLimiter limits wrong bearer tokens per client address: past its
	// budget a client is answered 429 with Retry-After. Give the dashboard
	// the same one, so that both share one budget. Defaults to
	// NewAuthLimiter(AuthLimit{}): 10 wrong tokens, then one more try every 6s.
	AuthLimiter *AuthLimiter
	// Dashboard, when set, is served under /dashboard/ on this listener with
	// its own authentication (package dashboard: a login form and session
	// cookie for browsers, or the same bearer token); every other path keeps
	// the bearer token. Defaults to nil: no dashboard.
	Dashboard http.Handler
	// MaxTypesPerSource is the cap a replay with "unrouted" folds event
	// types with before it selects them (silence.max_types_per_source, as
	// the streamer folds). Defaults to 100.
	MaxTypesPerSource int
	// LoopbackHostsOnly answers only requests whose Host names this machine
	// (localhost, 127.0.0.1, [::1], any port); any other gets 421 before
	// authentication. Set it when the token is public (inlet dev's): the
	// listener is on loopback then, and a web page the developer opens can
	// still reach it by DNS rebinding (its own name resolved to 127.0.0.1),
	// with that token. Defaults to false.
	LoopbackHostsOnly bool
}

func (c APIConfig) withDefaults() APIConfig {
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.RequestTimeout <= 0 {
		c.RequestTimeout = 60 * time.Second
	}
	if c.AuthLimiter == nil {
		c.AuthLimiter = NewAuthLimiter(AuthLimit{})
	}
	return c
}

func (c APIConfig) validate() error {
	if len(c.Token) < MinTokenBytes {
		return fmt.Errorf("admin.token: at least %d bytes required", MinTokenBytes)
	}
	if c.DB == nil {
		return errors.New("admin API: no database")
	}
	if c.MaxTypesPerSource < 0 {
		return fmt.Errorf("admin API: max types per source %d: must not be negative", c.MaxTypesPerSource)
	}
	return nil
}

// API is the admin HTTP API: JSON over the functions of this package, behind
// a bearer token.
//
//	GET  /api/events             ?source= &type= &since= &until= &external_id= &before= &limit=
//	                             &occurred_after= &occurred_before= &where= (a JSON path predicate over payload)
//	GET  /api/events/{id}        the event, its headers, raw_body (base64) and jobs with attempts
//	GET  /api/events/{id}/raw    the exact stored bytes, application/octet-stream
//	POST /api/events/verify      {"id": N} | {"since": "24h", "until": …, "source": …}
//	GET  /api/dlq                ?handler= &source= &error_class= &since= &until= &before= &limit=
//	GET  /api/dlq/{job_id}       the job with attempts, error text and event metadata
//	POST /api/replay             {"job_id": N, "expect_status": S, "expect_replays": R} | {"handler": H, "dead_letters": true} |
//	                             {"handler": H, "source": …, "event_type": …, "since": …, "until": …} |
//	                             {"handler": H, "unrouted": true, filters as before}, "dry_run": bool, "max_jobs": N
//	     /dashboard/             the web dashboard, when APIConfig.Dashboard is set
//
// GET /api/events answers {"events": [...], "next_before": "<cursor>"},
// next_before present only when more match: pass it back as before= for the
// next page. It is a string, ID@TIME@SNAPSHOT ([EventPage].Next): the pages
// it leads to show only the events the first page's snapshot held, so
// together they are the log at one moment (an event committed since is seen
// by listing again); a malformed one is 400. A bare id (before=123, what
// next_before was before it became a string) pages by id alone, each page
// in its own snapshot, and the page it answers starts a snapshot cursor.
// GET /api/dlq answers {"dead_letters": [...], "next_before": <job id>}.
//
// Time bounds are as [ParseTime] reads them. Errors are {"error": "..."}
// with 400 (bad request), 401 (token), 404 (unknown id or handler), 409
// (replay refused; re-verify by id of an event stored without a signature), 413 (a request body over 64 KiB), 429 (too many wrong tokens from the client's address,
// with Retry-After), 503 (database unavailable) or 500.
type API struct {
	cfg     APIConfig
	token   [sha256.Size]byte
	handler http.Handler
	hs      *httpserve.Server
}

// NewAPI checks cfg and returns the API; Start serves it on cfg.Listen, or
// mount Handler on a server of your own.
func NewAPI(cfg APIConfig) (*API, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	a := &API{cfg: cfg, token: sha256.Sum256([]byte(cfg.Token))}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/events", a.listEvents)
	mux.HandleFunc("GET /api/events/{id}", a.getEvent)
	mux.HandleFunc("GET /api/events/{id}/raw", a.getEventRaw)
	mux.HandleFunc("POST /api/events/verify", a.verifyEvents)
	mux.HandleFunc("GET /api/dlq", a.listDeadLetters)
	mux.HandleFunc("GET /api/dlq/{job_id}", a.getJob)
	mux.HandleFunc("POST /api/replay", a.replay)
	if cfg.Dashboard != nil {
		mux.Handle(dashboardPrefix, cfg.Dashboard)
	}
	a.handler = a.authenticate(mux)
	return a, nil
}

// Handler is the API's http.Handler, authentication included.
func (a *API) Handler() http.Handler { return a.handler }

// Start listens on cfg.Listen and serves until Stop.
func (a *API) Start(ctx context.Context) error {
	if a.cfg.Listen == "" {
		return errors.New("admin.listen: no address to listen on")
	}
	hs, err := httpserve.Start(ctx, httpserve.Config{
		Name:              "admin API",
		Addr:              a.cfg.Listen,
		Handler:           a.handler,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      a.cfg.RequestTimeout + cancelWait + 30*time.Second,
		IdleTimeout:       120 * time.Second,
	})
	if err != nil {
		return err
	}
	a.hs = hs
	a.cfg.Logger.Info("admin API listening", slog.String("addr", hs.Addr().String()))
	return nil
}

// Addr is the bound address once started.
func (a *API) Addr() string {
	if a == nil || a.hs == nil {
		return ""
	}
	return a.hs.Addr().String()
}

// Stop finishes in-flight requests (until ctx is done, then cuts them off)
// and closes the listener. Safe on a nil or unstarted API.
func (a *API) Stop(ctx context.Context) error {
	if a == nil {
		return nil
	}
	return a.hs.Stop(ctx)
}

// dashboardPrefix is where APIConfig.Dashboard is mounted.
const dashboardPrefix = "/dashboard/"

// isDashboard reports whether the dashboard authenticates r itself: its
// path, cleaned as the mux will clean it, is the dashboard's.
func (a *API) isDashboard(r *http.Request) bool {
	if a.cfg.Dashboard == nil {
		return false
	}
	p := r.URL.Path
	clean := path.Clean(p)
	under := func(p string) bool { return p == "/dashboard" || strings.HasPrefix(p, dashboardPrefix) }
	return under(p) && under(clean)
}

func (a *API) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
		w = rec
		w.Header().Set("Cache-Control", "no-store")
		// Every answer, errors and the mux's plain-text 404/405 included, is
		// what its Content-Type says: a browser must not sniff one into HTML.
		w.Header().Set("X-Content-Type-Options", "nosniff")
		if a.cfg.LoopbackHostsOnly && !loopbackHost(r.Host) {
			writeError(w, http.StatusMisdirectedRequest, "this listener answers requests for localhost only (its token is public): "+
				"open it as http://localhost:<port> or http://127.0.0.1:<port>")
		} else if a.isDashboard(r) {
			next.ServeHTTP(w, r)
		} else if !BearerPresented(r) {
			// No token guesses nothing: not an attempt (a browser's
			// favicon request or a probe behind the same proxy would
			// otherwise lock the operator out).
			w.Header().Set("WWW-Authenticate", `Bearer realm="inlet-admin"`)
			writeError(w, http.StatusUnauthorized, "missing or wrong bearer token")
		} else if end, wait, ok := a.cfg.AuthLimiter.Begin(r); !ok {
			w.Header().Set("Retry-After", RetryAfter(wait))
			writeError(w, http.StatusTooManyRequests, "too many wrong tokens from this address; retry after "+RetryAfter(wait)+"s")
		} else if !a.tokenOK(r) {
			end(true)
			w.Header().Set("WWW-Authenticate", `Bearer realm="inlet-admin"`)
			writeError(w, http.StatusUnauthorized, "missing or wrong bearer token")
		} else {
			end(false)
			next.ServeHTTP(w, r)
		}
		a.cfg.Logger.Info("admin request", slog.String("method", r.Method), slog.String("route", r.Pattern),
			slog.Int("status", rec.status), slog.Duration("took", time.Since(start)))
	})
}

// loopbackHost reports whether a request's Host names this machine:
// localhost or a loopback address, with or without a port.
func loopbackHost(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// tokenOK reports whether r carries the bearer token. It compares digests:
// constant time, and no length leak either.
func (a *API) tokenOK(r *http.Request) bool {
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	got := sha256.Sum256([]byte(token))
	return ok && strings.EqualFold(scheme, "Bearer") && subtle.ConstantTimeCompare(got[:], a.token[:]) == 1
}

type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (s *statusRecorder) WriteHeader(code int) {
	s.status = code
	s.ResponseWriter.WriteHeader(code)
}

// cancelWait is how long a request past RequestTimeout waits for PostgreSQL
// to stop its statement (the pool sends a cancel request when the request's
// context ends) before it is answered and its connection dropped: a request
// answered is one whose statement is gone, so retries cannot pile up
// backends beyond the pool's size. PostgreSQL takes a cancel within
// milliseconds but for a statement that computes long between two checks
// (a --where path comparing two long arrays: review helper-295).
const cancelWait = 30 * time.Second

func (a *API) context(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(database.WithCancelWait(r.Context(), cancelWait), a.cfg.RequestTimeout)
}

func (a *API) listEvents(w http.ResponseWriter, r *http.Request) {
	var f EventFilter
	p := params{q: r.URL.Query(), now: a.cfg.Now()}
	p.only("source", "provider", "type", "event_type", "external_id", "external_event_id", "since", "until",
		"occurred_after", "occurred_before", "where", "before", "limit")
	f.Provider = p.str("source", "provider")
	f.EventType = p.str("type", "event_type")
	f.ExternalEventID = p.str("external_id", "external_event_id")
	f.Since, f.Until = p.time("since"), p.time("until")
	f.OccurredAfter, f.OccurredBefore = p.time("occurred_after"), p.time("occurred_before")
	f.Where = p.str("where")
	// before is a page's next_before (a cursor, ListEvents checks it) or a
	// bare event id.
	f.Cursor, f.Limit = p.str("before"), int(p.int64("limit"))
	if p.err != nil {
		a.fail(w, p.err)
		return
	}
	respond(a, w, r, func(ctx context.Context) (any, error) { return ListEvents(ctx, a.cfg.DB, f) })
}

func (a *API) getEvent(w http.ResponseWriter, r *http.Request) {
	id, ok := a.pathID(w, r, "id")
	if !ok {
		return
	}
	respond(a, w, r, func(ctx context.Context) (any, error) { return GetEvent(ctx, a.cfg.DB, id) })
}

func (a *API) getEventRaw(w http.ResponseWriter, r *http.Request) {
	id, ok := a.pathID(w, r, "id")
	if !ok {
		return
	}
	ctx, cancel := a.context(r)
	defer cancel()
	e, err := GetEvent(ctx, a.cfg.DB, id)
	if err != nil {
		a.fail(w, err)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Disposition", fmt.Sprintf(`attachment; filename="event-%d.bin"`, e.ID))
	h.Set("Content-Length", strconv.Itoa(len(e.RawBody)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(e.RawBody)
}

// verifyBody is the JSON of POST /api/events/verify.
type verifyBody struct {
	ID     int64  `json:"id"`
	Since  string `json:"since"`
	Until  string `json:"until"`
	Source string `json:"source"`
}

func (a *API) verifyEvents(w http.ResponseWriter, r *http.Request) {
	var b verifyBody
	if !a.decode(w, r, &b) {
		return
	}
	p := params{now: a.cfg.Now()}
	req := VerifyRequest{ID: b.ID, Provider: b.Source, Since: p.parseTime("since", b.Since), Until: p.parseTime("until", b.Until)}
	if p.err != nil {
		a.fail(w, p.err)
		return
	}
	respond(a, w, r, func(ctx context.Context) (any, error) { return Reverify(ctx, a.cfg.DB, a.cfg.Sources, req) })
}

func (a *API) listDeadLetters(w http.ResponseWriter, r *http.Request) {
	p := params{q: r.URL.Query(), now: a.cfg.Now()}
	p.only("handler", "source", "provider", "error_class", "since", "until", "before", "limit")
	f := DeadLetterFilter{
		Handler:    p.str("handler"),
		Provider:   p.str("source", "provider"),
		ErrorClass: p.str("error_class"),
		Since:      p.time("since"),
		Until:      p.time("until"),
		Before:     p.int64("before"),
		Limit:      int(p.int64("limit")),
	}
	if p.err != nil {
		a.fail(w, p.err)
		return
	}
	respond(a, w, r, func(ctx context.Context) (any, error) { return ListDeadLetters(ctx, a.cfg.DB, f) })
}

func (a *API) getJob(w http.ResponseWriter, r *http.Request) {
	id, ok := a.pathID(w, r, "job_id")
	if !ok {
		return
	}
	respond(a, w, r, func(ctx context.Context) (any, error) { return GetJob(ctx, a.cfg.DB, id) })
}

// replayBody is the JSON of POST /api/replay.
type replayBody struct {
	JobID int64 `json:"job_id"`
	// ExpectStatus, with job_id: replay only while the job still has this
	// status (ReplayRequest.ExpectStatus); 409 if it moved.
	ExpectStatus string `json:"expect_status"`
	// ExpectReplays, with job_id: replay only while the job has been
	// replayed this many times (its "replays"; ReplayRequest.ExpectReplays);
	// 409 if it was replayed since. Absent checks nothing.
	ExpectReplays *int   `json:"expect_replays"`
	Handler       string `json:"handler"`
	DeadLetters   bool   `json:"dead_letters"`
	// Unrouted, with handler, is inlet replay --unrouted.
	Unrouted  bool   `json:"unrouted"`
	Source    string `json:"source"`
	EventType string `json:"event_type"`
	Since     string `json:"since"`
	Until     string `json:"until"`
	DryRun    bool   `json:"dry_run"`
	MaxJobs   int    `json:"max_jobs"`
}

func (a *API) replay(w http.ResponseWriter, r *http.Request) {
	var b replayBody
	if !a.decode(w, r, &b) {
		return
	}
	p := params{now: a.cfg.Now()}
	req := ReplayRequest{
		JobID: b.JobID, ExpectStatus: b.ExpectStatus, ExpectReplays: b.ExpectReplays, Handler: b.Handler, DeadLetters: b.DeadLetters, Unrouted: b.Unrouted,
		Provider: b.Source, EventType: b.EventType,
		Since: p.parseTime("since", b.Since), Until: p.parseTime("until", b.Until),
		DryRun: b.DryRun, MaxJobs: b.MaxJobs, MaxTypesPerSource: a.cfg.MaxTypesPerSource,
	}
	if p.err != nil {
		a.fail(w, p.err)
		return
	}
	ctx, cancel := a.context(r)
	defer cancel()
	res, err := Replay(ctx, a.cfg.DB, req)
	if err != nil {
		a.fail(w, err)
		return
	}
	if !res.DryRun {
		a.cfg.Logger.Info("replay", slog.Int64("job_id", b.JobID), slog.String("handler", b.Handler),
			slog.Bool("dead_letters", b.DeadLetters), slog.Bool("unrouted", b.Unrouted),
			slog.Int("requeued", res.Requeued), slog.Int("created", res.Created))
	}
	writeJSON(w, http.StatusOK, res)
}

// maxRequestBody bounds the JSON bodies the API reads.
const maxRequestBody = 64 << 10

// decode reads r's body as one JSON object into v (an empty body leaves v
// as it is). A body over maxRequestBody is 413; one that is not exactly one
// object (unknown fields, trailing data after it) is 400 and nothing runs.
func (a *API) decode(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxRequestBody))
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if err == nil {
		if _, after := dec.Token(); !errors.Is(after, io.EOF) {
			err = errors.New("data after the JSON object")
			if after != nil {
				err = after
			}
		}
	} else if errors.Is(err, io.EOF) {
		err = nil
	}
	var tooLarge *http.MaxBytesError
	switch {
	case err == nil:
		return true
	case errors.As(err, &tooLarge):
		writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("request body: over %d bytes", tooLarge.Limit))
	default:
		a.fail(w, invalid("request body: %v", err))
	}
	return false
}

func (a *API) pathID(w http.ResponseWriter, r *http.Request, name string) (int64, bool) {
	id, err := strconv.ParseInt(r.PathValue(name), 10, 64)
	if err != nil || id <= 0 {
		a.fail(w, invalid("%s %q: must be a positive integer", name, r.PathValue(name)))
		return 0, false
	}
	return id, true
}

func (a *API) fail(w http.ResponseWriter, err error) {
	code := http.StatusInternalServerError
	switch {
	case errors.Is(err, ErrInvalid):
		code = http.StatusBadRequest
	case errors.Is(err, ErrNotFound):
		code = http.StatusNotFound
	case errors.Is(err, ErrConflict):
		code = http.StatusConflict
	case database.IsUnavailable(err):
		code = http.StatusServiceUnavailable
		w.Header().Set("Retry-After", "5")
	}
	if code >= 500 {
		a.cfg.Logger.Error("admin request failed", slog.String("error", err.Error()))
	}
	writeError(w, code, err.Error())
}

func writeError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, map[string]string{"error": msg})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		code, b = http.StatusInternalServerError, []byte(`{"error":"encode response"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)+1))
	w.WriteHeader(code)
	_, _ = w.Write(append(b, '\n'))
}

// params reads query parameters, keeping the first error.
type params struct {
	q   url.Values
	now time.Time
	err error
}

// only refuses a query parameter not among known (a misspelt filter, say
// `sorce`, would otherwise list everything as if it were not there), and
// one given twice (only one value would count).
func (p *params) only(known ...string) {
	for _, k := range slices.Sorted(maps.Keys(p.q)) {
		switch {
		case p.err != nil:
			return
		case !slices.Contains(known, k):
			p.err = invalid("unknown query parameter %q (known: %s)", k, strings.Join(known, ", "))
		case len(p.q[k]) > 1:
			p.err = invalid("query parameter %q given %d times; give it once", k, len(p.q[k]))
		}
	}
}

// str is the value of the one of names (a filter's names: source and
// provider) that is set; two of them set is an error, as one name given
// twice is (only).
func (p *params) str(names ...string) string {
	v, set := "", ""
	for _, n := range names {
		if _, ok := p.q[n]; !ok {
			continue
		}
		if set != "" && p.err == nil {
			p.err = invalid("query parameters %q and %q are one filter; give one of them", set, n)
		}
		if set == "" {
			v, set = p.q.Get(n), n
		}
	}
	return v
}

func (p *params) int64(name string) int64 {
	s := p.q.Get(name)
	if s == "" {
		return 0
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil && p.err == nil {
		p.err = invalid("%s %q: not an integer", name, s)
	}
	return n
}

func (p *params) time(name string) time.Time { return p.parseTime(name, p.q.Get(name)) }

func (p *params) parseTime(name, s string) time.Time {
	t, err := ParseTime(s, p.now)
	if err != nil && p.err == nil {
		p.err = fmt.Errorf("%s: %w", name, err)
	}
	return t
}

// respond runs f under the request's deadline and answers with its result as
// JSON, or with the error as fail maps it.
func respond(a *API, w http.ResponseWriter, r *http.Request, f func(ctx context.Context) (any, error)) {
	ctx, cancel := a.context(r)
	defer cancel()
	v, err := f(ctx)
	if err != nil {
		a.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, v)
}

// BearerPresented reports whether r presents a bearer token (an
// Authorization header of scheme Bearer, any case): only that is an attempt
// at the admin token, counted by the AuthLimiter (here and in the
// dashboard).
func BearerPresented(r *http.Request) bool {
	scheme, _, _ := strings.Cut(r.Header.Get("Authorization"), " ")
	return strings.EqualFold(scheme, "Bearer")
}
