package controlplane

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"reflect"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inlet-dev/inlet/reporter"
)

// Tenant is one reporting data plane (an entry of control_plane.tenants).
type Tenant struct {
	// Name identifies the tenant in the tables and on its page. Required;
	// lower-case letters, digits, '-' and '_'.
	Name string `yaml:"name"`
	// Token is its bearer token (reports), and its page password. Required,
	// at least 16 bytes; give it as ${VAR}.
	Token string `yaml:"token"`
}

// Config configures a [Server].
type Config struct {
	// Pool is the control plane's own database, migrated with [Migrate].
	// Required.
	Pool *pgxpool.Pool
	// Tenants are the data planes that may report. At least one.
	Tenants []Tenant
	// Logger receives tenant names, counts and refusal reasons, never a
	// token or a record. Defaults to slog.Default().
	Logger *slog.Logger
}

// maxBody bounds a report's body: MaxBatch records are well under it.
const maxBody = 2 << 20

// Server is the control plane's HTTP handler.
type Server struct {
	pool    *pgxpool.Pool
	log     *slog.Logger
	tenants []tenantKey
	mux     *http.ServeMux
}

type tenantKey struct {
	name   string
	digest [sha256.Size]byte
}

// New returns a server for cfg.
func New(cfg Config) (*Server, error) {
	if cfg.Pool == nil {
		return nil, errors.New("controlplane: Pool is required")
	}
	if len(cfg.Tenants) == 0 {
		return nil, errors.New("controlplane: at least one tenant is required")
	}
	s := &Server{pool: cfg.Pool, log: cfg.Logger, mux: http.NewServeMux()}
	if s.log == nil {
		s.log = slog.Default()
	}
	for i, t := range cfg.Tenants {
		if t.Name == "" || len(t.Token) < 16 {
			return nil, fmt.Errorf("controlplane: tenants[%d]: a name and a token of at least 16 bytes are required", i)
		}
		k := tenantKey{name: t.Name, digest: sha256.Sum256([]byte(t.Token))}
		// A token selects exactly one tenant: with two, tenantOf took the
		// last, and one data plane's reports were stored as another's.
		// (Two tokens of one name are allowed: a rotation.)
		for j, o := range s.tenants {
			if o.digest == k.digest {
				return nil, fmt.Errorf("controlplane: tenants[%d] (%q) has the token of tenants[%d] (%q): each tenant needs a token of its own", i, t.Name, j, o.name)
			}
		}
		s.tenants = append(s.tenants, k)
	}
	s.mux.HandleFunc("POST /api/v1/reports", s.bearer(s.postReports))
	s.mux.HandleFunc("GET /api/v1/cursor", s.bearer(s.getCursor))
	s.mux.HandleFunc("GET /{$}", s.basic(s.page))
	s.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	return s, nil
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Cache-Control", "no-store")
	s.mux.ServeHTTP(w, r)
}

// tenantOf returns the tenant whose token is token. Every tenant's digest is
// compared, in constant time, so the answer's timing tells nothing.
func (s *Server) tenantOf(token string) (string, bool) {
	d := sha256.Sum256([]byte(token))
	found := ""
	for _, t := range s.tenants {
		if subtle.ConstantTimeCompare(d[:], t.digest[:]) == 1 {
			found = t.name
		}
	}
	return found, found != "" && token != ""
}

type tenantHandler func(w http.ResponseWriter, r *http.Request, tenant string)

func (s *Server) bearer(h tenantHandler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		tenant, known := s.tenantOf(token)
		if !ok || !known {
			w.Header().Set("WWW-Authenticate", `Bearer realm="inlet control plane"`)
			writeError(w, http.StatusUnauthorized, "a tenant's bearer token is required")
			return
		}
		h(w, r, tenant)
	}
}

func (s *Server) basic(h tenantHandler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		user, pass, ok := r.BasicAuth()
		tenant, known := s.tenantOf(pass)
		if !ok || !known || subtle.ConstantTimeCompare([]byte(user), []byte(tenant)) != 1 {
			w.Header().Set("WWW-Authenticate", `Basic realm="inlet control plane", charset="UTF-8"`)
			http.Error(w, "log in with the tenant's name and token", http.StatusUnauthorized)
			return
		}
		h(w, r, tenant)
	}
}

type errorBody struct {
	Error string `json:"error"`
}

func writeError(w http.ResponseWriter, status int, reason string) {
	writeJSON(w, status, errorBody{Error: reason})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// decodeBatch reads a batch strictly: one JSON object, no unknown field at
// any level, every record valid. Records are decoded one at a time and the
// batch refused at record MaxBatch+1: a 2 MiB body of empty records (about
// 700,000) decoded whole took some 585 MiB before its count was checked
// (review helper-306), memory every tenant's reports share.
func decodeBatch(body []byte) (reporter.Batch, error) {
	var b reporter.Batch
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := readBatch(dec, &b); err != nil {
		var syn *json.SyntaxError
		if errors.As(err, &syn) {
			// Placed in the whole body: a record's decoder counts only
			// its own bytes. Scanned, not decoded: no memory.
			var whole json.RawMessage
			if werr := json.Unmarshal(body, &whole); errors.As(werr, &syn) {
				err = syn
			}
		}
		return b, decodeError(err)
	}
	if dec.More() {
		return b, errors.New("body: more than one JSON value")
	}
	if _, err := dec.Token(); err != io.EOF {
		return b, errors.New("body: trailing data after the batch")
	}
	if b.Records == nil {
		return b, errors.New(`body: "records" is required`)
	}
	return b, b.Validate()
}

// errNotBatch is a body whose shape is not a batch's.
var errNotBatch = errors.New("body: not a JSON batch")

// readBatch reads {"records": [record, …]} token by token, each record with
// dec (so its unknown fields are refused too), at most MaxBatch of them.
// The key matches as encoding/json's would (case-insensitively); a second
// "records" is refused rather than silently replacing the first.
func readBatch(dec *json.Decoder, b *reporter.Batch) error {
	if err := expectDelim(dec, '{'); err != nil {
		return err
	}
	seen := false
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		key, _ := tok.(string)
		if !strings.EqualFold(key, "records") {
			return errors.New("json: unknown field")
		}
		if seen {
			return errors.New(`body: "records" given twice`)
		}
		seen = true
		if err := readRecords(dec, b); err != nil {
			return err
		}
	}
	return expectDelim(dec, '}')
}

func readRecords(dec *json.Decoder, b *reporter.Batch) error {
	tok, err := dec.Token()
	switch {
	case err != nil:
		return err
	case tok == nil:
		return nil // null: "records" is required, said by the caller
	case tok != json.Delim('['):
		return errors.New(`body: "records" is not an array`)
	}
	b.Records = []reporter.Record{}
	for dec.More() {
		if len(b.Records) == reporter.MaxBatch {
			return fmt.Errorf("%w: more than %d records, at most %d per batch", reporter.ErrInvalidRecord, reporter.MaxBatch, reporter.MaxBatch)
		}
		// Each record read whole first, then decoded on its own, so a
		// wrong kind of value is placed in the batch (start + its offset).
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return err
		}
		start := dec.InputOffset() - int64(len(raw))
		var rec reporter.Record
		rdec := json.NewDecoder(bytes.NewReader(raw))
		rdec.DisallowUnknownFields()
		if err := rdec.Decode(&rec); err != nil {
			var typ *json.UnmarshalTypeError
			if errors.As(err, &typ) {
				typ.Field = strings.TrimSuffix("records."+typ.Field, ".")
				typ.Offset += start
			}
			return err
		}
		b.Records = append(b.Records, rec)
	}
	return expectDelim(dec, ']')
}

func expectDelim(dec *json.Decoder, want json.Delim) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	if tok != want {
		return errNotBatch
	}
	return nil
}

// decodeError is the reason for a body readBatch refused. The decoder's
// text may quote what the sender wrote (an unknown field's name): this
// reason is logged, so it names places only.
func decodeError(err error) error {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.Is(err, reporter.ErrInvalidRecord), errors.Is(err, errNotBatch),
		strings.HasPrefix(err.Error(), "body: "):
		return err
	case errors.As(err, &syn):
		return fmt.Errorf("body: malformed JSON at byte %d", syn.Offset)
	case errors.As(err, &typ):
		return typeError(typ)
	case strings.HasPrefix(err.Error(), "json: unknown field"):
		return errors.New("body: an unknown field (a field a batch does not have; its name is not quoted here)")
	default:
		return errNotBatch
	}
}

// typeError is the reason for a JSON value of the wrong kind, or a number
// that does not fit its field. It names the field and the value's kind only:
// encoding/json puts a number's literal in typ.Value ("number 1e999"), which
// is the sender's text, of any length, and this reason is logged and sent.
func typeError(typ *json.UnmarshalTypeError) error {
	kind, _, _ := strings.Cut(typ.Value, " ")
	field := cmp.Or(typ.Field, "the batch")
	want, number := "another kind of value", false
	if typ.Type != nil {
		switch typ.Type.Kind() {
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
			reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
			want, number = "a whole number", true
		case reflect.Float32, reflect.Float64:
			want, number = "a number", true
		case reflect.String:
			want = "a string"
		case reflect.Bool:
			want = "true or false"
		case reflect.Slice, reflect.Array:
			want = "an array"
		case reflect.Struct, reflect.Map:
			want = "an object"
		}
	}
	if kind == "number" && number {
		return fmt.Errorf("body: %s: a JSON number that does not fit it (it takes %s in range; the number is not quoted here), at byte %d",
			field, want, typ.Offset)
	}
	return fmt.Errorf("body: %s: a JSON %s where it takes %s, at byte %d", field, kind, want, typ.Offset)
}

func (s *Server) postReports(w http.ResponseWriter, r *http.Request, tenant string) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("body over %d bytes", maxBody))
		return
	}
	b, err := decodeBatch(body)
	if err != nil {
		s.log.Warn("report refused", slog.String("tenant", tenant), slog.String("reason", err.Error()))
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	st, err := s.store(r, tenant, b.Records)
	if err != nil {
		s.log.Error("store report", slog.String("tenant", tenant), slog.Int("records", len(b.Records)), slog.String("error", err.Error()))
		w.Header().Set("Retry-After", "5")
		writeError(w, http.StatusServiceUnavailable, "could not store the report; send it again")
		return
	}
	s.log.Debug("report stored", slog.String("tenant", tenant), slog.Int("records", len(b.Records)), slog.Int64("new", st.stored),
		slog.Int64("cursor_before", st.cursorBefore), slog.Int64("arrival_before", st.arrivalBefore), slog.Int64("arrival", st.arrival))
	writeJSON(w, http.StatusOK, reporter.Answer{Received: len(b.Records), Stored: st.stored,
		CursorBefore: &st.cursorBefore, ArrivalBefore: &st.arrivalBefore, Arrival: &st.arrival})
}

// stored is what storing a report did: how many of its records were new,
// the tenant's cursor and highest arrival number held before it, and its
// highest arrival number held after it.
type stored struct {
	stored, cursorBefore, arrivalBefore, arrival int64
}

// store stores recs (a record already held is kept as it was), numbering
// them in the tenant's arrival order (InsertAttempts).
func (s *Server) store(r *http.Request, tenant string, recs []reporter.Record) (stored, error) {
	n := len(recs)
	var (
		ids                                      = make([]int64, n)
		jobs, outcomes, classes, provs, evtTypes = make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		attempts                                 = make([]int32, n)
		durs                                     = make([]float64, n)
		starts, ends                             = make([]time.Time, n), make([]time.Time, n)
	)
	for i, rec := range recs {
		ids[i], jobs[i], outcomes[i], attempts[i], durs[i] = rec.AttemptID, rec.Job, string(rec.Outcome), int32(rec.Attempt), rec.DurationMS //nolint:gosec // G115: decodeBatch's Validate bounds Attempt to [0, 1e6]
		classes[i], starts[i], ends[i], provs[i], evtTypes[i] = string(rec.ErrorClass), rec.StartedAt, rec.FinishedAt, rec.Provider, rec.EventType
	}
	var st stored
	err := s.pool.QueryRow(r.Context(), query("InsertAttempts"), tenant, ids, jobs, outcomes, attempts, durs, classes, starts, ends, provs, evtTypes).
		Scan(&st.stored, &st.cursorBefore, &st.arrivalBefore, &st.arrival)
	if err != nil {
		return stored{}, fmt.Errorf("insert %d records: %w", n, err)
	}
	return st, nil
}

func (s *Server) getCursor(w http.ResponseWriter, r *http.Request, tenant string) {
	var c reporter.Cursor
	c.Arrival = new(int64)
	if err := s.pool.QueryRow(r.Context(), query("Cursor"), tenant).Scan(&c.AttemptID, c.Arrival); err != nil {
		s.log.Error("read cursor", slog.String("tenant", tenant), slog.String("error", err.Error()))
		w.Header().Set("Retry-After", "5")
		writeError(w, http.StatusServiceUnavailable, "could not read the cursor")
		return
	}
	writeJSON(w, http.StatusOK, c)
}
