package relay

import (
	"context"
	"crypto/rand"
	"encoding/hex"
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
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/inlet-dev/inlet/ingress/sources"
	"github.com/inlet-dev/inlet/ingress/verify"
	"github.com/inlet-dev/inlet/internal/bodyread"
	"github.com/inlet-dev/inlet/internal/httpserve"
	"github.com/inlet-dev/inlet/internal/logvalue"
	"github.com/inlet-dev/inlet/internal/metrics"
)

// Config configures a Server.
type Config struct {
	// Section holds the listener, target, secrets and limits (see
	// Section for each field's default). WithDefaults is applied by
	// New, and Target and Secrets are required.
	Section
	// Sources are the accepted senders, verified as ingress verifies them.
	// At least one is required.
	Sources []sources.Source
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Now is the clock of signature windows and of the relay signature.
	// Defaults to time.Now.
	Now func() time.Time
	// Transport sends forwarded requests. Defaults to one built from
	// Section.CAFile: TLS verified, bounded connections, no compression.
	Transport http.RoundTripper
	// Metrics registers inlet_relay_*; nil discards them.
	Metrics prometheus.Registerer
}

// Server is the relay's HTTP service.
type Server struct {
	cfg     Config
	sources map[string]*source
	fwd     *forwarder
	mux     *http.ServeMux
	// body reads request bodies within relay.max_inflight_bytes.
	body    bodyread.Reader
	metrics *relayMetrics

	mu sync.Mutex
	hs *httpserve.Server

	// rejectLog rate-limits the lines of rejected requests per source and
	// reason: a sender repeating one cannot fill the relay's log.
	rejectLog *logvalue.Limiter
}

type source struct {
	name     string
	verifier verify.Verifier
	// unsigned are the headers not forwarded nor signed for this source:
	// relay.unsigned_headers and the defaults, less those it reads.
	unsigned verify.RelayUnsigned
}

// New checks cfg and builds a verifier per source and the forwarding client.
// Errors name the bad field and never hold a secret.
func New(cfg Config) (*Server, error) {
	cfg.Section = cfg.Section.WithDefaults()
	if err := cfg.Section.ValidateForServe(); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if len(cfg.Sources) == 0 {
		return nil, errors.New("sources: at least one source is required to relay webhooks")
	}
	s := &Server{cfg: cfg, sources: map[string]*source{}, rejectLog: logvalue.NewLimiter(rejectLogEvery),
		body: bodyread.Reader{Budget: bodyread.NewBudget(cfg.MaxInflightBytes, cfg.MaxBodyBytes), WaitTimeout: cfg.Timeout, ReadTimeout: readTimeout}}
	unsigned, err := verify.NewRelayUnsigned(cfg.UnsignedHeaders)
	if err != nil {
		return nil, fmt.Errorf("relay.unsigned_headers%w", err)
	}
	for i, sc := range cfg.Sources {
		v, err := verify.New(sc.Config)
		if err != nil {
			return nil, fmt.Errorf("sources[%d] %q: %w", i, sc.Name, err)
		}
		reads := verify.RelaySourceHeaders(sc.Config)
		for _, h := range reads {
			if unsigned.Matches(h) {
				cfg.Logger.Warn("source reads a header proxies set about each hop: forwarded and signed, so no proxy in front of the ingress may set it",
					slog.String("source", sc.Name), slog.String("header", h))
			}
		}
		s.sources[sc.Name] = &source{name: sc.Name, verifier: v, unsigned: unsigned.Keeping(reads)}
	}
	names := make([]string, 0, len(cfg.Sources))
	for _, sc := range cfg.Sources {
		names = append(names, sc.Name)
	}
	m, err := newRelayMetrics(metrics.OrDiscard(cfg.Metrics), names, s.body.Budget)
	if err != nil {
		return nil, fmt.Errorf("relay metrics: %w", err)
	}
	s.metrics = m
	fwd, err := newForwarder(cfg)
	if err != nil {
		return nil, err
	}
	s.fwd = fwd
	mux := http.NewServeMux()
	mux.HandleFunc("POST /webhooks/{source}", s.handleWebhook)
	// GET only for providers that check the endpoint with a GET handshake
	// (Meta, X, Dropbox, Okta): answered here, as ingress would, since it
	// stores nothing and the relay holds the same secrets.
	mux.HandleFunc("GET /webhooks/{source}", s.handleWebhook)
	// Every other answer under /webhooks/ is JSON too, as ingress's, not
	// net/http's plain text: another method on a source (405, 404 for an
	// unknown one), any other path (404 unknown_source: no {source}).
	mux.HandleFunc("/webhooks/{source}", s.handleWebhook)
	mux.HandleFunc("/webhooks/", s.handleWebhook)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	s.mux = mux
	return s, nil
}

// Handler is the HTTP handler (for tests and for embedding).
func (s *Server) Handler() http.Handler { return http.HandlerFunc(s.serve) }

// serve serves s.mux, except for a path under /webhooks/ that is not in its
// clean form (/webhooks//stripe): ServeMux would answer it with a bare
// redirect, which providers count as a failed delivery; it is 404
// unknown_source, as at ingress.
func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	if p := r.URL.Path; strings.HasPrefix(p, "/webhooks/") && path.Clean(p) != p {
		r.SetPathValue("source", "")
		s.handleWebhook(w, r)
		return
	}
	s.mux.ServeHTTP(w, r)
}

// readTimeout bounds reading one request from a provider.
const readTimeout = 10 * time.Second

// Start listens on cfg.Listen and serves in the background.
func (s *Server) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.hs != nil {
		return errors.New("relay: already started")
	}
	hs, err := httpserve.Start(ctx, httpserve.Config{
		Name:              "relay",
		Addr:              s.cfg.Listen,
		Handler:           http.HandlerFunc(s.serve),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       readTimeout,
		// Reading, then forwarding within Timeout, then answering.
		WriteTimeout:   readTimeout + s.cfg.Timeout + 2*time.Second,
		IdleTimeout:    120 * time.Second,
		MaxHeaderBytes: 64 << 10,
		ErrorLog:       s.cfg.Logger,
	})
	if err != nil {
		return err
	}
	s.hs = hs
	s.cfg.Logger.Info("relay listening", slog.String("addr", hs.Addr().String()), slog.Int("sources", len(s.sources)))
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

// Stop stops accepting requests and waits for in-flight ones (their forwards
// included) until ctx is done; requests still running then are cut off.
func (s *Server) Stop(ctx context.Context) error {
	s.mu.Lock()
	hs := s.hs
	s.mu.Unlock()
	if hs == nil {
		return nil
	}
	err := hs.Stop(ctx)
	s.fwd.close()
	return err
}

// rejectLogEvery is how often a rejection of one source for one reason (of
// any unknown source, for unknown_source) is logged at most; the lines held
// back are counted in the next one (suppressed).
const rejectLogEvery = time.Second

// answer is the relay's own answer body: short, fixed texts, never the
// request body.
type answer struct {
	Status string `json:"status"`
	Reason string `json:"reason,omitempty"`
}

func (s *Server) handleWebhook(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	name := r.PathValue("source")
	src, ok := s.sources[name]
	relayID := newRelayID()
	// The source name is the sender's path: cut, as ingress cuts it (an
	// unknown one may be anything, a token in a mistaken URL included).
	log := s.cfg.Logger.With(append(logvalue.Attrs("source", name), slog.String("relay_id", relayID))...)
	label := name
	if !ok {
		label = unknownSource
	}
	count := func(outcome string) { s.metrics.requests.WithLabelValues(label, outcome).Inc() }
	reject := func(code int, reason string) {
		writeJSON(w, code, answer{Status: "rejected", Reason: reason})
		count(outcomeRejected)
		s.metrics.rejected.WithLabelValues(label, reason).Inc()
		key := name
		if !ok {
			key = "" // every unknown source shares one key
		}
		allowed, suppressed := s.rejectLog.Allow(key+"\x00"+reason, time.Now())
		if !allowed {
			return
		}
		attrs := []any{slog.Int("status", code), slog.String("reason", reason)}
		if suppressed > 0 {
			attrs = append(attrs, slog.Int("suppressed", suppressed))
		}
		log.Info("webhook rejected", attrs...)
	}
	if !ok {
		reject(http.StatusNotFound, "unknown_source")
		return
	}
	// POST; GET only for a source with a GET handshake (the GET route takes
	// HEAD too, which no handshake is: 405, as at ingress).
	if r.Method != http.MethodPost && (r.Method != http.MethodGet || !verify.AnswersGET(src.verifier)) {
		allow := http.MethodPost
		if verify.AnswersGET(src.verifier) {
			allow += ", " + http.MethodGet
		}
		w.Header().Set("Allow", allow)
		reject(http.StatusMethodNotAllowed, "method_not_allowed")
		return
	}

	limit := s.cfg.MaxBodyBytes
	if r.ContentLength > limit {
		w.Header().Set("Connection", "close")
		reject(http.StatusRequestEntityTooLarge, "body_too_large")
		return
	}
	// Within relay.max_inflight_bytes, held until the forward is done: any
	// sender can open connections, and each would otherwise hold up to
	// max_body_bytes.
	body, held, fault := s.body.Read(r.Context(), w, r, limit)
	defer s.body.Budget.Release(held)
	switch fault {
	case bodyread.OK:
	case bodyread.Gone:
		return // the sender left while waiting
	case bodyread.Overloaded:
		w.Header().Set("Retry-After", "5")
		w.Header().Set("Connection", "close") // the body is left unread
		writeJSON(w, http.StatusServiceUnavailable, answer{Status: "unavailable", Reason: "overloaded"})
		count(outcomeOverloaded)
		log.Warn("webhook not read: relay.max_inflight_bytes stayed in use for relay.timeout", slog.Int64("content_length", r.ContentLength))
		return
	case bodyread.TooLarge:
		w.Header().Set("Connection", "close")
		reject(http.StatusRequestEntityTooLarge, "body_too_large")
		return
	case bodyread.Timeout:
		w.Header().Set("Connection", "close")
		reject(http.StatusRequestTimeout, "body_read_timeout")
		return
	default:
		w.Header().Set("Connection", "close")
		reject(http.StatusBadRequest, "body_unreadable")
		return
	}
	res, err := src.verifier.Verify(&verify.Request{Method: r.Method, Header: r.Header, Body: body, URL: requestURL(r), Now: s.cfg.Now()})
	if err != nil {
		code := http.StatusUnauthorized
		if errors.Is(err, verify.ErrMalformedPayload) {
			code = http.StatusBadRequest
		}
		reject(code, verify.Reason(err))
		return
	}
	if hs := res.Handshake; hs != nil && r.Method == http.MethodGet {
		// A GET handshake is answered here; POST ones (Slack, Zoom, Twitch,
		// Discord, ...) go through the ingress like events, whose answer
		// is passed on.
		hs.Write(w)
		count(outcomeHandshake)
		log.Info("handshake answered", slog.String("kind", hs.Kind))
		return
	}

	// Reading may have taken most of ReadTimeout; forwarding gets its own.
	_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(s.cfg.Timeout + 2*time.Second))
	log = log.With(logvalue.Attrs("event_type", res.EventType)...)
	// A provider that hangs up does not cut the forward off half-way: it
	// finishes (within Timeout), and the provider's retry is a duplicate.
	fstart := time.Now()
	out := s.fwd.forward(context.WithoutCancel(r.Context()), name, src.unsigned, r, body, relayID)
	s.metrics.forward.WithLabelValues(name).Observe(time.Since(fstart).Seconds())
	if out.err != nil {
		log.Warn("webhook not relayed", slog.String("error_class", out.class), slog.Int("attempts", out.attempts),
			slog.String("error", out.err.Error()), slog.Duration("took", time.Since(start)))
	}
	switch {
	case out.status/100 == 2:
		// Committed by the customer's ingress: its answer is the provider's
		// (a duplicate's, or Slack's url_verification challenge).
		w.Header().Set("Content-Type", out.contentType)
		w.Header().Set("Content-Length", strconv.Itoa(len(out.body)))
		w.WriteHeader(out.status)
		_, _ = w.Write(out.body)
		count(outcomeRelayed)
		if c, ok := src.verifier.(verify.SecretConfirmer); ok && out.stored {
			// A new event (not a replay of a stored one): the GET
			// handshakes this relay answers itself (X's CRC) use its secret.
			c.SecretConfirmed(res.SecretIndex)
		}
		log.Info("webhook relayed", slog.Int("status", out.status), slog.Int("attempts", out.attempts),
			slog.Duration("took", time.Since(start)))
	case out.err != nil || out.status/100 == 5:
		// Not committed, or not known to be: the provider must retry.
		w.Header().Set("Retry-After", out.retryAfter)
		writeJSON(w, http.StatusServiceUnavailable, answer{Status: "unavailable", Reason: "ingress_unavailable"})
		count(outcomeUnavailable)
		if out.err == nil {
			log.Warn("webhook not relayed", slog.Int("ingress_status", out.status), slog.String("ingress_reason", out.reason),
				slog.Duration("took", time.Since(start)))
		}
	case permanentReason[out.reason] == out.status:
		// The ingress refused the event's own data (an id or type over its
		// limits, data the database refuses, headers over the fixed limits
		// every ingress has): the same request would be refused on every
		// retry, so the provider gets the ingress's 400 or 431, not a 502 to
		// retry for days.
		w.Header().Set("Content-Type", out.contentType)
		w.Header().Set("Content-Length", strconv.Itoa(len(out.body)))
		w.WriteHeader(out.status)
		_, _ = w.Write(out.body)
		count(outcomeIngressRefused)
		log.Warn("customer ingress refused the event's own data; answered as it did", slog.Int("ingress_status", out.status),
			slog.String("ingress_reason", out.reason), slog.Duration("took", time.Since(start)))
	default:
		// The ingress refused a webhook the relay verified: the two disagree
		// (secrets, limits, clocks), which an operator fixes; the provider
		// retries meanwhile.
		w.Header().Set("Retry-After", out.retryAfter)
		writeJSON(w, http.StatusBadGateway, answer{Status: "unavailable", Reason: "ingress_rejected"})
		count(outcomeIngressRefused)
		log.Error("customer ingress refused a verified webhook", slog.Int("ingress_status", out.status),
			slog.String("ingress_reason", out.reason), slog.Duration("took", time.Since(start)))
	}
}

// permanentReason are the ingress's refusals, by reason and with the status
// that goes with it, that name the event's own data, which no change of
// secrets, limits or clocks between relay and ingress would let through:
// passed on to the provider as the ingress answered them. The header limits
// are constants of every ingress (ingress.MaxHeaderCount, MaxHeaderBytes),
// counted without the relay's own headers.
var permanentReason = map[string]int{
	"malformed_payload":   http.StatusBadRequest,
	"event_id_too_long":   http.StatusBadRequest,
	"event_type_too_long": http.StatusBadRequest,
	"event_unstorable":    http.StatusBadRequest,
	"too_many_headers":    http.StatusRequestHeaderFieldsTooLarge,
	"headers_too_large":   http.StatusRequestHeaderFieldsTooLarge,
}

// requestURL reconstructs the URL the sender used, for schemes that sign it
// (twilio), as ingress does.
func requestURL(r *http.Request) string {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + r.Host + r.URL.RequestURI()
}

// newRelayID is a random id matching the relay's log lines with the
// ingress's request.
func newRelayID() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	b, _ := json.Marshal(v)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)+1))
	w.WriteHeader(code)
	_, _ = w.Write(append(b, '\n'))
}
