package ingress

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"path"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/inlet-dev/inlet/ingress/sources"
	"github.com/inlet-dev/inlet/ingress/verify"
	"github.com/inlet-dev/inlet/internal/bodyread"
	"github.com/inlet-dev/inlet/internal/database"
	"github.com/inlet-dev/inlet/internal/health"
	"github.com/inlet-dev/inlet/internal/httpserve"
	"github.com/inlet-dev/inlet/internal/logvalue"
	"github.com/inlet-dev/inlet/internal/metrics"
	"github.com/inlet-dev/inlet/internal/tracing"
	"github.com/inlet-dev/inlet/schema"
)

// Verifier checks one request's signature and says which event it carries.
type Verifier interface {
	Verify(req *verify.Request) (verify.Result, error)
}

// Readiness reports whether the service can do its work (database reachable
// and writable, schema current). Nil means ready.
type Readiness func(ctx context.Context) error

// Config configures a Server.
type Config struct {
	// Section holds the listener, limits and timeouts (see Section for
	// each field's default). WithDefaults is applied by New.
	Section
	// Sources are the accepted senders. At least one is required.
	Sources []sources.Source
	// Store persists verified events. Required.
	Store Store
	// Ready backs GET /readyz. Defaults to always ready.
	Ready Readiness
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Now is the clock for signature windows. Defaults to time.Now.
	Now func() time.Time
	// Metrics registers the ingress metrics (inlet_ingress_*). Nil: not
	// exported.
	Metrics prometheus.Registerer
}

type source struct {
	name     string
	scheme   string
	verifier Verifier
	// relay, when set, requires an Inlet-Relay-Signature (relay_secrets).
	relay *relayCheck
	// secretLogged is when each secret's use was last logged (unix seconds),
	// so rotations are visible without a line per webhook.
	secretLogged []atomic.Int64
	// occurredAt reads the provider's event time; storeJSON and jsonMax
	// say whether bodies get a payload copy (sources.<name>.store_json).
	occurredAt verify.OccurredAt
	storeJSON  bool
	jsonMax    int
}

// secretLogEvery is how often the use of each secret is logged again.
const secretLogEvery = time.Hour

func (src *source) noteSecret(idx int, now time.Time, log *slog.Logger) {
	if idx < 0 || idx >= len(src.secretLogged) {
		return
	}
	last := src.secretLogged[idx].Load()
	if now.Unix()-last < int64(secretLogEvery/time.Second) || !src.secretLogged[idx].CompareAndSwap(last, now.Unix()) {
		return
	}
	log.Info("signing secret in use", slog.Int("secret_index", idx), slog.Int("secrets", len(src.secretLogged)))
}

var tracer = tracing.Tracer("ingress")

// Server is the webhook HTTP service.
type Server struct {
	cfg     Config
	sources map[string]*source
	mux     *http.ServeMux
	metrics *ingressMetrics
	// inflight holds the bytes of the bodies being read or stored; body
	// reads bodies within it.
	inflight *bodyread.Budget
	body     bodyread.Reader
	// rejectLog rate-limits the lines of rejected requests per source and
	// reason: a sender repeating a bad request must not fill the log.
	rejectLog *logvalue.Limiter
	// readyLog logs /readyz failures once per change of state.
	readyLog health.ReadyLog

	// stopping is set when Stop begins: Ready answers ErrStopping from then
	// on, so a load balancer probing the metrics listener takes the
	// instance out while it drains.
	stopping atomic.Bool

	mu sync.Mutex
	hs *httpserve.Server
	// cut ends with Stop's deadline: the writes still running then are cut
	// off (their requests' contexts do not end them: handleWebhook).
	cut     context.Context
	cutDone context.CancelFunc
}

// New builds the server and a verifier per source. Errors name the bad source
// field (`sources[1] "github": secrets[0]: must not be empty`).
func New(cfg Config) (*Server, error) {
	cfg.Section = cfg.Section.WithDefaults()
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Ready == nil {
		cfg.Ready = func(context.Context) error { return nil }
	}
	if cfg.Store == nil {
		return nil, errors.New("ingress: Store is required")
	}
	// The store's own lines (a failed read of the filtered subscriptions)
	// go to the server's log, not the process default.
	if sl, ok := cfg.Store.(interface{ useLogger(*slog.Logger) }); ok {
		sl.useLogger(cfg.Logger)
	}
	// The bodies it parses for the subscription filters are bounded by a
	// room sized from the budget (parseRoom).
	if pr, ok := cfg.Store.(interface{ useParseRoom(int64) }); ok {
		pr.useParseRoom(cfg.MaxInflightBytes)
	}
	if len(cfg.Sources) == 0 {
		return nil, errors.New("sources: at least one source is required to receive webhooks")
	}
	s := &Server{cfg: cfg, sources: map[string]*source{}, inflight: bodyread.NewBudget(cfg.MaxInflightBytes, cfg.MaxBodyBytes),
		rejectLog: logvalue.NewLimiter(rejectLogEvery)}
	s.body = bodyread.Reader{Budget: s.inflight, WaitTimeout: cfg.StoreTimeout, ReadTimeout: cfg.ReadTimeout}
	s.cut, s.cutDone = context.WithCancel(context.Background())
	names := make([]string, 0, len(cfg.Sources))
	for _, sc := range cfg.Sources {
		names = append(names, sc.Name)
	}
	m, err := newIngressMetrics(metrics.OrDiscard(cfg.Metrics), names, s.inflight)
	if err != nil {
		return nil, fmt.Errorf("ingress metrics: %w", err)
	}
	s.metrics = m
	if fm, ok := cfg.Store.(interface{ FilterMetrics() prometheus.Collector }); ok {
		if err := metrics.OrDiscard(cfg.Metrics).Register(fm.FilterMetrics()); err != nil {
			return nil, fmt.Errorf("ingress filter metrics: %w", err)
		}
	}
	for i, sc := range cfg.Sources {
		if sc.Name == "" || len(sc.Name) > MaxSourceNameBytes {
			return nil, fmt.Errorf("sources[%d].name: must be 1-%d bytes, got %d", i, MaxSourceNameBytes, len(sc.Name))
		}
		v, err := verify.New(sc.Config)
		if err != nil {
			return nil, fmt.Errorf("sources[%d] %q: %w", i, sc.Name, err)
		}
		s.sources[sc.Name] = &source{name: sc.Name, scheme: sc.Type, verifier: v,
			relay:        newRelayCheck(sc.RelaySecrets, sc.RelayTolerance),
			secretLogged: make([]atomic.Int64, len(sc.Secrets)),
			occurredAt:   verify.NewOccurredAt(sc.Config)}
		s.sources[sc.Name].storeJSON, s.sources[sc.Name].jsonMax = sc.JSONCopy()
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /webhooks/{source}", s.handleWebhook)
	// GET only for the providers that check the endpoint with a GET
	// handshake (Meta, X, Dropbox, Okta); anything else is 405.
	mux.HandleFunc("GET /webhooks/{source}", s.handleWebhook)
	// Every other answer under /webhooks/ is the documented JSON too, not
	// net/http's plain text: another method on a source (405), any other
	// path (404 unknown_source).
	mux.HandleFunc("/webhooks/{source}", s.handleOtherMethod)
	mux.HandleFunc("/webhooks/", s.handleOtherPath)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("GET /readyz", s.handleReady)
	s.mux = mux
	return s, nil
}

// Handler is the HTTP handler (for tests and for embedding).
func (s *Server) Handler() http.Handler { return http.HandlerFunc(s.serve) }

// serve serves s.mux, except for a path under /webhooks/ that is not in its
// clean form (/webhooks//stripe, /webhooks/./stripe): ServeMux would answer
// it with a bare redirect, which providers count as a failed delivery and
// which says nothing, so it gets the documented 404 unknown_source, counted
// and logged.
func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	if p := r.URL.Path; strings.HasPrefix(p, "/webhooks/") && path.Clean(p) != p {
		s.handleOtherPath(w, r)
		return
	}
	s.mux.ServeHTTP(w, r)
}

// Start listens on cfg.Listen and serves in the background.
func (s *Server) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.hs != nil {
		return errors.New("ingress: already started")
	}
	hs, err := httpserve.Start(ctx, httpserve.Config{
		Name:              "ingress",
		Addr:              s.cfg.Listen,
		Handler:           http.HandlerFunc(s.serve),
		ReadHeaderTimeout: min(5*time.Second, s.cfg.ReadTimeout),
		ReadTimeout:       s.cfg.ReadTimeout,
		WriteTimeout:      s.cfg.WriteTimeout,
		IdleTimeout:       s.cfg.IdleTimeout,
		MaxHeaderBytes:    64 << 10,
		MaxConnections:    s.cfg.MaxConnections,
		ErrorLog:          s.cfg.Logger,
	})
	if err != nil {
		return err
	}
	s.hs = hs
	s.cfg.Logger.Info("ingress listening", slog.String("addr", hs.Addr().String()), slog.Int("sources", len(s.sources)))
	return nil
}

// Addr is the bound address once started.
func (s *Server) Addr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.hs == nil {
		return nil
	}
	return s.hs.Addr()
}

// Stop stops accepting requests and waits for in-flight ones until ctx is done;
// requests still running then are cut off.
func (s *Server) Stop(ctx context.Context) error {
	s.stopping.Store(true)
	s.mu.Lock()
	hs := s.hs
	s.mu.Unlock()
	if hs == nil {
		return nil
	}
	err := hs.Stop(ctx)
	// After a graceful stop nothing runs; after the deadline the requests
	// still running are cut off, their writes too (review helper-100).
	s.cutDone()
	// Every request has its answer: a store with committers of its own
	// (GroupStore) can stop now. Its batches run on their own context, not
	// the requests': they are cut off at ctx's deadline too, else Stop
	// would wait for them up to store_timeout past it.
	switch c := s.cfg.Store.(type) {
	case interface{ closeBy(context.Context) }:
		c.closeBy(ctx)
	case interface{ Close() }:
		c.Close()
	}
	return err
}

// ErrStopping is Ready's answer once Stop has begun.
var ErrStopping = errors.New("ingress is stopping: draining the requests in flight")

// Ready is the ingress's readiness: Config.Ready's, and ErrStopping once
// Stop has begun. Serve it on the metrics listener's /readyz (the webhook
// port stops accepting when Stop begins).
func (s *Server) Ready(ctx context.Context) error {
	if s.stopping.Load() {
		return ErrStopping
	}
	return s.cfg.Ready(ctx)
}

func (s *Server) handleReady(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	if err := s.Ready(ctx); err != nil {
		reason := readinessReason(err)
		// Once per change of state: this port is public and unauthenticated.
		s.readyLog.Note(s.cfg.Logger, reason, err)
		w.Header().Set("Retry-After", "5")
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "unavailable", "reason": reason})
		return
	}
	s.readyLog.Note(s.cfg.Logger, "", nil)
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
}

// readinessReason is the reason /readyz answers for err. A read-only
// database is database_unavailable, as the webhooks it refuses are.
func readinessReason(err error) string {
	if database.IsUnavailable(err) || errors.Is(err, schema.ErrReadOnly) {
		return "database_unavailable"
	}
	return "not_ready"
}

// Answer bodies: short, fixed texts; never the request body.
type answer struct {
	Status string `json:"status"`
	Reason string `json:"reason,omitempty"`
}

// handleWebhook answers POST /webhooks/{source}: 2xx only once the verified
// event is committed. Each step answers the request itself when it ends it
// early (and then returns false or nil).
func (s *Server) handleWebhook(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	// A new trace per webhook: trace headers from the internet are not trusted.
	ctx, span := tracer.Start(r.Context(), "inlet.ingress.webhook", trace.WithNewRoot(), trace.WithSpanKind(trace.SpanKindServer))
	defer span.End()
	wh := s.route(w, r, span, start)
	if wh == nil || !wh.methodAllowed() || !wh.withinLimits() {
		return
	}
	body, held, ok := wh.read(ctx)
	defer s.inflight.Release(held)
	if !ok {
		return
	}
	header, res, ok := wh.verify(body)
	if !ok {
		return
	}
	if res.Handshake != nil {
		wh.handshake(res.Handshake)
		return
	}
	// The write deadline started when the headers were read; a slow upload
	// must not eat the time the answer needs after the commit.
	_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(s.cfg.StoreTimeout + 2*time.Second))
	// Only store_timeout bounds the write of a verified event, not the
	// sender's side of the connection: net/http cancels the request's
	// context when it sees the sender half-close (golang/go#18527), which
	// failed every such delivery as database_unavailable (review
	// helper-98). A sender that left gets its event stored all the same, and
	// its retry is a duplicate.
	// Stop's deadline still cuts it off (cut).
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.StoreTimeout)
	defer cancel()
	defer context.AfterFunc(s.cut, cancel)()
	event, ok := wh.event(ctx, header, body, res)
	if !ok {
		return
	}
	stored, ok := wh.store(ctx, event)
	if !ok {
		return
	}
	wh.accepted(event, res, stored)
}

// webhook is one request to POST /webhooks/{source} of a known source, as
// handleWebhook's steps pass it along.
type webhook struct {
	s     *Server
	w     http.ResponseWriter
	r     *http.Request
	span  trace.Span
	src   *source
	log   *slog.Logger // with the source's name
	start time.Time
}

// route finds the request's source; an unknown one is answered 404 here.
func (s *Server) route(w http.ResponseWriter, r *http.Request, span trace.Span, start time.Time) *webhook {
	name := r.PathValue("source")
	src, ok := s.sources[name]
	if !ok {
		span.SetAttributes(attribute.String("inlet.source", unknownSource), attribute.String("inlet.outcome", "rejected"),
			attribute.String("inlet.reason", "unknown_source"))
		s.metrics.received.WithLabelValues(unknownSource).Inc()
		s.metrics.rejected.WithLabelValues(unknownSource, "unknown_source").Inc()
		writeJSON(w, http.StatusNotFound, answer{Status: "rejected", Reason: "unknown_source"})
		// The name is the sender's: cut, and one line a second at most
		// whatever names it sends.
		s.logRejected(s.cfg.Logger, unknownSource, "unknown_source", append(logvalue.Attrs("source", name), slog.String("reason", "unknown_source"))...)
		return nil
	}
	s.metrics.received.WithLabelValues(name).Inc()
	span.SetAttributes(attribute.String("inlet.source", name), attribute.String("inlet.scheme", src.scheme))
	return &webhook{s: s, w: w, r: r, span: span, src: src, log: s.cfg.Logger.With(slog.String("source", name)), start: start}
}

// handleOtherMethod answers a method other than POST and GET on
// /webhooks/{source}: 405 method_not_allowed for a known source (404 for
// an unknown one), as handleWebhook answers a GET the source does not take.
func (s *Server) handleOtherMethod(w http.ResponseWriter, r *http.Request) {
	span := trace.SpanFromContext(r.Context())
	wh := s.route(w, r, span, time.Now())
	if wh == nil {
		return
	}
	allow := http.MethodPost
	if verify.AnswersGET(wh.src.verifier) {
		allow += ", " + http.MethodGet
	}
	w.Header().Set("Allow", allow)
	wh.reject(http.StatusMethodNotAllowed, "method_not_allowed")
}

// handleOtherPath answers a path under /webhooks/ that names no source
// (/webhooks/, /webhooks/stripe/extra): 404 unknown_source.
func (s *Server) handleOtherPath(w http.ResponseWriter, r *http.Request) {
	s.route(w, r, trace.SpanFromContext(r.Context()), time.Now()) // no {source}: unknown
}

// methodAllowed answers 405 to any method but POST, and GET for a source
// whose provider checks the endpoint with a GET handshake.
func (wh *webhook) methodAllowed() bool {
	get := verify.AnswersGET(wh.src.verifier)
	// The GET route takes HEAD too, which no handshake is (review helper-98:
	// it was answered 401 signature_missing).
	if wh.r.Method == http.MethodPost || (wh.r.Method == http.MethodGet && get) {
		return true
	}
	allow := http.MethodPost
	if get {
		allow += ", " + http.MethodGet
	}
	wh.w.Header().Set("Allow", allow)
	wh.reject(http.StatusMethodNotAllowed, "method_not_allowed")
	return false
}

// handshake answers a provider's verified check of the endpoint. It is not
// an event: nothing is stored.
func (wh *webhook) handshake(hs *verify.Handshake) {
	wh.s.metrics.handshakes.WithLabelValues(wh.src.name, hs.Kind).Inc()
	wh.span.SetAttributes(attribute.String("inlet.outcome", "handshake"), attribute.String("inlet.handshake", hs.Kind))
	hs.Write(wh.w)
	wh.log.Info("handshake answered", slog.String("kind", hs.Kind))
}

// reject answers a request the source's sender must not send again as is.
func (wh *webhook) reject(code int, reason string) {
	wh.span.SetAttributes(attribute.String("inlet.outcome", "rejected"), attribute.String("inlet.reason", reason))
	wh.s.metrics.rejected.WithLabelValues(wh.src.name, reason).Inc()
	writeJSON(wh.w, code, answer{Status: "rejected", Reason: reason})
	wh.s.logRejected(wh.log, wh.src.name, reason, slog.Int("status", code), slog.String("reason", reason))
}

// withinLimits checks the headers and the announced body length before any
// of the body is read. They are stored with the event: over a limit, every
// retry would be refused too. The relay's own Inlet-Relay-* headers are not
// stored and not counted, nor, for a source behind the relay, headers added
// after it (not stored either), so a relayed webhook is held to the limits
// the provider's request is held to when sent directly.
func (wh *webhook) withinLimits() bool {
	var lim *limitError
	stored := verify.StripRelay(wh.r.Header)
	if wh.src.relay != nil {
		// Only what the relay signed is stored (relayCheck.check): a
		// proxy's headers added after the relay do not count.
		stored = verify.RelayListedHeaders(wh.r.Header)
	}
	if err := checkHeaders(stored); errors.As(err, &lim) {
		wh.w.Header().Set("Connection", "close") // the body is left unread
		wh.reject(lim.status, lim.reason)
		return false
	}
	if wh.r.ContentLength > wh.s.cfg.MaxBodyBytes {
		wh.w.Header().Set("Connection", "close")
		wh.reject(http.StatusRequestEntityTooLarge, "body_too_large")
		return false
	}
	return true
}

// read reads the body into room held in the in-flight budget: past
// ingress.max_inflight_bytes the request waits unread, so TCP holds the
// sender back, for at most the store timeout. The caller releases held,
// whether the read succeeded or not.
func (wh *webhook) read(ctx context.Context) (body []byte, held int64, ok bool) {
	body, held, fault := wh.s.body.Read(ctx, wh.w, wh.r, wh.s.cfg.MaxBodyBytes)
	switch fault {
	case bodyread.Gone:
		return nil, held, false // the sender left while waiting
	case bodyread.Overloaded:
		// Not all read, nothing acknowledged: the provider retries.
		wh.w.Header().Set("Connection", "close") // the body is left unread
		wh.s.overloaded(wh.w, wh.span, wh.src.name)
		// At most a line a second: when the requests waiting are too many
		// this comes at once, as fast as they arrive.
		wh.s.logLimited(wh.log, wh.src.name, "overloaded", slog.LevelWarn,
			"webhook not read: ingress.max_inflight_bytes stayed in use for ingress.store_timeout, or too many requests were waiting for it",
			slog.Int64("content_length", wh.r.ContentLength))
		return nil, held, false
	case bodyread.TooLarge:
		wh.w.Header().Set("Connection", "close")
		wh.reject(http.StatusRequestEntityTooLarge, "body_too_large")
		return nil, held, false
	case bodyread.Timeout:
		// Too slow a sender loses its room, not the others.
		wh.w.Header().Set("Connection", "close")
		wh.reject(http.StatusRequestTimeout, "body_read_timeout")
		return nil, held, false
	case bodyread.Broken:
		wh.w.Header().Set("Connection", "close")
		wh.reject(http.StatusBadRequest, "body_unreadable")
		return nil, held, false
	}
	return body, held, true
}

// verify checks the signatures (the relay's first, when the source takes
// its webhooks through the relay) and returns the headers the provider
// signed and what its verifier read from them. Those never hold
// Inlet-Relay-*: with relay_secrets they are checked and dropped; without,
// no relay is trusted, so whoever sent them is not one and they are dropped
// unread (not refused: no provider signs them, and a relay pointed at an
// ingress not yet given its secrets still delivers what a direct delivery
// would store).
func (wh *webhook) verify(body []byte) (http.Header, verify.Result, bool) {
	header := verify.StripRelay(wh.r.Header)
	if wh.src.relay != nil {
		// Only the relay may deliver: its signature first, then the provider's.
		var err error
		if header, err = wh.src.relay.check(wh.src.name, wh.r, body, wh.s.cfg.Now()); err != nil {
			wh.reject(http.StatusUnauthorized, relayReason(err))
			return nil, verify.Result{}, false
		}
	}
	res, err := wh.src.verifier.Verify(&verify.Request{
		Method: wh.r.Method,
		Header: header,
		Body:   body,
		URL:    requestURL(wh.r),
		Now:    wh.s.cfg.Now(),
	})
	if err != nil {
		reason := verify.Reason(err)
		if errors.Is(err, verify.ErrMalformedPayload) {
			wh.reject(http.StatusBadRequest, reason)
			return nil, verify.Result{}, false
		}
		wh.reject(http.StatusUnauthorized, reason)
		return nil, verify.Result{}, false
	}
	return header, res, true
}

// event is the verified request as it is stored, its headers redacted as
// the verifier asks. An id or type the database cannot index is rejected
// here: it would fail every retry.
func (wh *webhook) event(ctx context.Context, header http.Header, body []byte, res verify.Result) (*Event, bool) {
	headers := header
	if red, ok := wh.src.verifier.(verify.StorageRedactor); ok {
		headers = red.RedactForStorage(headers)
	}
	event := &Event{
		Provider:    wh.src.name,
		Scheme:      wh.src.scheme,
		ExternalID:  res.EventID,
		EventType:   res.EventType,
		Headers:     headers,
		RequestURI:  storedURI(wh.r.URL.RequestURI()),
		RawBody:     body,
		SecretIndex: res.SecretIndex,
		Verified:    true,
		TraceParent: tracing.TraceParent(ctx),
		OccurredAt:  wh.src.occurredAt(header, body),
		StoreJSON:   wh.src.storeJSON && JSONCopyable(body, wh.src.jsonMax),
	}
	var lim *limitError
	if err := checkEvent(event); errors.As(err, &lim) {
		wh.reject(lim.status, lim.reason)
		return nil, false
	}
	return event, true
}

// store commits the event (ctx carries ingress.store_timeout) and says
// whether it was new (false: a duplicate). A failed store is answered here.
func (wh *webhook) store(ctx context.Context, event *Event) (stored, ok bool) {
	wh.span.SetAttributes(attribute.String("inlet.event_type", event.EventType))
	stored, err := wh.s.cfg.Store.Insert(ctx, event)
	if err != nil {
		wh.s.storeFailed(wh.w, wh.span, wh.log, wh.src.name, event.EventType, err, wh.reject)
		return false, false
	}
	return stored, true
}

// accepted answers a committed (or duplicate) event 200.
func (wh *webhook) accepted(event *Event, res verify.Result, stored bool) {
	s, name := wh.s, wh.src.name
	s.metrics.accepted(name, !stored, wh.start)
	if stored {
		s.metrics.lag(name, event.OccurredAt, s.cfg.Now())
	}
	status := "stored"
	if !stored {
		status = "duplicate"
	}
	wh.span.SetAttributes(attribute.String("inlet.outcome", status))
	wh.src.noteSecret(res.SecretIndex, s.cfg.Now(), wh.log)
	if c, ok := wh.src.verifier.(verify.SecretConfirmer); ok && stored {
		// A new event, not a replay of a stored one: its secret is the
		// one the provider signs with now.
		c.SecretConfirmed(res.SecretIndex)
	}
	if r := res.Reply; r != nil {
		// The provider expects its own answer (a Discord interaction response).
		r.Write(wh.w)
	} else {
		writeJSON(wh.w, http.StatusOK, answer{Status: status})
	}
	wh.log.Debug("webhook accepted", append(logvalue.Attrs("event_type", res.EventType), slog.String("status", status),
		slog.Int("secret_index", res.SecretIndex), slog.Duration("took", time.Since(wh.start)))...)
}

// rejectLogEvery is how often a rejection of one source for one reason is
// logged at most; the lines held back are counted in the next one
// (suppressed) and every rejection in inlet_ingress_rejected_total.
const rejectLogEvery = time.Second

// logRejected writes a "webhook rejected" line unless one for source and
// reason was written less than rejectLogEvery ago.
func (s *Server) logRejected(log *slog.Logger, source, reason string, attrs ...any) {
	s.logLimited(log, source, reason, slog.LevelInfo, "webhook rejected", attrs...)
}

// logLimited writes msg at level unless a line for source and reason was
// written less than rejectLogEvery ago; the lines held back are counted in
// the next one (suppressed).
func (s *Server) logLimited(log *slog.Logger, source, reason string, level slog.Level, msg string, attrs ...any) {
	ok, suppressed := s.rejectLog.Allow(source+"\x00"+reason, time.Now())
	if !ok {
		return
	}
	if suppressed > 0 {
		attrs = append(attrs, slog.Int("suppressed", suppressed))
	}
	log.Log(context.Background(), level, msg, attrs...)
}

// overloaded answers 503 overloaded with Retry-After, nothing stored: a
// request ingress had no memory for (see read, storeFailed).
func (s *Server) overloaded(w http.ResponseWriter, span trace.Span, source string) {
	s.metrics.overloaded.WithLabelValues(source).Inc()
	span.SetAttributes(attribute.String("inlet.outcome", "unavailable"), attribute.String("inlet.reason", "overloaded"))
	w.Header().Set("Retry-After", "5")
	writeJSON(w, http.StatusServiceUnavailable, answer{Status: "unavailable", Reason: "overloaded"})
}

// storeFailed answers a webhook whose Store.Insert failed, after what the
// error says about the write (classify).
func (s *Server) storeFailed(w http.ResponseWriter, span trace.Span, log *slog.Logger, source, eventType string, err error,
	reject func(code int, reason string)) {
	if errors.Is(err, errOverloaded) {
		// No room to parse its body for the filters: known not written.
		s.overloaded(w, span, source)
		s.logLimited(log, source, "overloaded", slog.LevelWarn,
			"webhook not stored: no room to parse its body for the subscription filters within ingress.store_timeout",
			append(logvalue.Attrs("event_type", eventType), logvalue.ErrorAttr(err))...)
		return
	}
	fault := classify(err)
	if fault == faultPermanent {
		// The database refused the event's own data (or a store's limit
		// did): the same request would be refused again.
		span.SetStatus(codes.Error, "event cannot be stored")
		reject(http.StatusBadRequest, "event_unstorable")
		log.Warn("webhook cannot be stored", append(logvalue.Attrs("event_type", eventType), logvalue.ErrorAttr(err))...)
		return
	}
	// Not acknowledged, so the provider retries.
	s.metrics.unavailable.WithLabelValues(source).Inc()
	span.SetAttributes(attribute.String("inlet.outcome", "unavailable"))
	w.Header().Set("Retry-After", "5")
	if fault == faultUnknown {
		// Sent, but its answer never came (the store timeout fired, the
		// connection or the server went away): the transaction may still
		// commit, and then the retry is answered "duplicate".
		s.metrics.outcomeUnknown.WithLabelValues(source).Inc()
		span.SetStatus(codes.Error, "outcome unknown")
		writeJSON(w, http.StatusServiceUnavailable, answer{Status: "unavailable", Reason: "outcome_unknown"})
		log.Error("webhook outcome unknown; the provider's retry will be deduplicated", append(logvalue.Attrs("event_type", eventType), logvalue.ErrorAttr(err))...)
		return
	}
	// Known not committed: never sent, or refused by the server (which
	// rolled it back).
	reason := "database_unavailable"
	if errors.Is(err, ErrStoreClosed) {
		reason = "shutting_down"
	}
	span.SetStatus(codes.Error, "not stored")
	writeJSON(w, http.StatusServiceUnavailable, answer{Status: "unavailable", Reason: reason})
	log.Error("webhook not stored", append(logvalue.Attrs("event_type", eventType),
		slog.Bool("database_unavailable", database.IsUnavailable(err)), logvalue.ErrorAttr(err))...)
}

// storedURI is a request URI as events.request_uri keeps it: as received,
// but with each byte that is not part of valid UTF-8 percent-encoded. Go
// keeps a query's raw bytes, and PostgreSQL refuses text that is not UTF-8
// (SQLSTATE 22021): a correctly signed webhook with a raw 0xff in its query
// would be answered 400, and in group commit fail its whole batch's
// statement. The stored URI is unsigned metadata; verifiers that sign the
// URL get it exactly as received (requestURL).
func storedURI(uri string) string {
	if utf8.ValidString(uri) {
		return uri
	}
	var b strings.Builder
	b.Grow(len(uri) + 8)
	for i := 0; i < len(uri); {
		r, size := utf8.DecodeRuneInString(uri[i:])
		if r == utf8.RuneError && size == 1 {
			fmt.Fprintf(&b, "%%%02X", uri[i])
		} else {
			b.WriteString(uri[i : i+size])
		}
		i += size
	}
	return b.String()
}

// requestURL reconstructs the URL the sender used, for schemes that sign it.
func requestURL(r *http.Request) string {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + r.Host + r.URL.RequestURI()
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	b, _ := json.Marshal(v)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)+1))
	w.WriteHeader(code)
	_, _ = w.Write(append(b, '\n'))
}
