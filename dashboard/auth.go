package dashboard

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/inlet-dev/inlet/admin"
)

// cookieName is the session cookie. (A __Host- prefix would need Path=/,
// and the cookie belongs to /dashboard/ only.)
const cookieName = "inlet_dashboard"

// maxFormBody bounds the forms the dashboard reads.
const maxFormBody = 8 << 10

// session is one login, or the stand-in for a request that carried a valid
// bearer token (bearer: no cookie, no CSRF token, no flash).
type session struct {
	digest  [sha256.Size]byte
	expires time.Time
	flash   *flash
	bearer  bool
}

// flash is a one-time message shown on the next page.
type flash struct {
	OK      bool
	Message string
}

// sessions are the logins of this process, by the sha256 of their cookie
// (so the map holds no usable cookie value).
type sessions struct {
	ttl     time.Duration
	now     func() time.Time
	csrfKey [32]byte

	mu       sync.Mutex
	byDigest map[[sha256.Size]byte]*session
}

func newSessions(ttl time.Duration, now func() time.Time) (*sessions, error) {
	s := &sessions{ttl: ttl, now: now, byDigest: map[[sha256.Size]byte]*session{}}
	if _, err := rand.Read(s.csrfKey[:]); err != nil {
		return nil, fmt.Errorf("dashboard: session key: %w", err)
	}
	return s, nil
}

// create starts a session and returns it with its cookie value.
func (ss *sessions) create() (*session, string, error) {
	var id [32]byte
	if _, err := rand.Read(id[:]); err != nil {
		return nil, "", fmt.Errorf("session id: %w", err)
	}
	now := ss.now()
	s := &session{digest: sha256.Sum256(id[:]), expires: now.Add(ss.ttl)}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	for k, old := range ss.byDigest {
		if !now.Before(old.expires) {
			delete(ss.byDigest, k)
		}
	}
	ss.byDigest[s.digest] = s
	return s, base64.RawURLEncoding.EncodeToString(id[:]), nil
}

// get returns the live session of a cookie value, or nil.
func (ss *sessions) get(value string) *session {
	// Strict: a session has one spelling. The lenient decoder ignores the
	// last character's unused bits, so four cookie values would name one
	// session (and an "altered" cookie could still be it).
	id, err := base64.RawURLEncoding.Strict().DecodeString(value)
	if err != nil || len(id) != 32 {
		return nil
	}
	digest := sha256.Sum256(id)
	ss.mu.Lock()
	defer ss.mu.Unlock()
	s := ss.byDigest[digest]
	if s == nil {
		return nil
	}
	if !ss.now().Before(s.expires) {
		delete(ss.byDigest, digest)
		return nil
	}
	return s
}

func (ss *sessions) end(s *session) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	delete(ss.byDigest, s.digest)
}

// csrf is the session's form token: an HMAC of the session under a
// per-process key, so it needs no storage and differs from the cookie.
func (ss *sessions) csrf(s *session) string {
	if s.bearer {
		return ""
	}
	m := hmac.New(sha256.New, ss.csrfKey[:])
	m.Write(s.digest[:])
	return hex.EncodeToString(m.Sum(nil))
}

func (ss *sessions) checkCSRF(s *session, token string) bool {
	want := ss.csrf(s)
	return subtle.ConstantTimeCompare([]byte(token), []byte(want)) == 1
}

func (ss *sessions) setFlash(s *session, f flash) {
	if s.bearer {
		return
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	s.flash = &f
}

func (ss *sessions) takeFlash(s *session) *flash {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	f := s.flash
	s.flash = nil
	return f
}

// tokenOK compares a presented token with the admin token: digests, so in
// constant time and without leaking the length.
func (d *Dashboard) tokenOK(token string) bool {
	got := sha256.Sum256([]byte(token))
	return subtle.ConstantTimeCompare(got[:], d.token[:]) == 1
}

// crossOrigin refuses state-changing requests a browser sent from another
// origin (Sec-Fetch-Site, else Origin against Host). net/http's check lets
// a request with neither header through; sameOrigin adds the Referer.
var crossOrigin = http.NewCrossOriginProtection()

// errForeignReferer is a state-changing request without Sec-Fetch-Site or
// Origin whose Referer names another host.
var errForeignReferer = errors.New("dashboard: Referer names another host")

// sameOrigin refuses a state-changing request a browser sent from another
// origin: by Sec-Fetch-Site, else Origin against Host (crossOrigin), else,
// when a browser sent neither (an older one, an embedded web view), by a
// Referer naming another host. A request with none of the three is not
// from a browser; the CSRF token still guards sessions. Referrer-Policy
// same-origin keeps our own pages' Referer whole.
func sameOrigin(r *http.Request) error {
	if err := crossOrigin.Check(r); err != nil {
		return err
	}
	ref := r.Header.Get("Referer")
	if ref == "" || r.Header.Get("Sec-Fetch-Site") != "" || r.Header.Get("Origin") != "" {
		return nil
	}
	u, err := url.Parse(ref)
	if err != nil || u.Host == "" || !strings.EqualFold(u.Host, r.Host) {
		return errForeignReferer
	}
	return nil
}

// handlerFunc is a page handler behind authentication.
type handlerFunc func(w http.ResponseWriter, r *http.Request, s *session)

// authenticated lets through a request with a live session cookie or a
// script's valid bearer header (one without a dashboard cookie, not a
// browser navigation). Without either a GET is redirected to the login
// form; anything else is refused. A state-changing request on a cookie must
// come from our own origin and carry the session's CSRF token.
func (d *Dashboard) authenticated(next handlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// A live session decides first: an SSO proxy in front (oauth2-proxy
		// passing the user's ID token, Pomerium, Envoy ext_authz) sends its
		// own Authorization: Bearer with every request, which was compared
		// with the admin token, refused (401 on every page of a logged-in
		// operator) and charged as a wrong token, locking the proxy's
		// shared address out of the API. Behind a live session the header
		// is neither compared nor charged.
		var s *session
		stale := false // a dashboard cookie, but no live session
		if c, err := r.Cookie(cookieName); err == nil {
			s = d.sessions.get(c.Value)
			stale = s == nil
		}
		// Without one, a bearer token is an attempt, but only a script's: a
		// request that carries a dashboard cookie (stale: expired, or of a
		// process before a restart) or that a browser sent navigating
		// comes from a browser, which cannot send a bearer itself; the
		// header is a proxy's in front (review helper-227). It is neither
		// compared (no oracle) nor charged, and the request goes to the
		// login form as one without a session. Another scheme (Basic, from
		// a proxy in front) is never an attempt.
		if auth := r.Header.Get("Authorization"); s == nil && !stale && !browserNavigation(r) && admin.BearerPresented(r) {
			end, ok := d.limit(w, r, nil)
			if !ok {
				return
			}
			scheme, token, ok := strings.Cut(auth, " ")
			if !ok || !strings.EqualFold(scheme, "Bearer") || !d.tokenOK(token) {
				end(true)
				w.Header().Set("WWW-Authenticate", `Bearer realm="inlet-admin"`)
				d.fail(w, r, nil, http.StatusUnauthorized, "Missing or wrong bearer token.")
				return
			}
			end(false)
			next(w, r, &session{bearer: true})
			return
		}
		if s == nil {
			if r.Method == http.MethodGet || r.Method == http.MethodHead {
				http.Redirect(w, r, "/dashboard/login?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
				return
			}
			d.fail(w, r, nil, http.StatusUnauthorized, "Log in first.")
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			if err := sameOrigin(r); err != nil {
				d.fail(w, r, nil, http.StatusForbidden, "Refused: the form was not sent from this dashboard.")
				return
			}
			if !d.readForm(w, r) {
				return
			}
			if !d.sessions.checkCSRF(s, r.PostFormValue("csrf")) {
				d.fail(w, r, nil, http.StatusForbidden, "Refused: the form's CSRF token is missing or stale. Reload the page and try again.")
				return
			}
		}
		next(w, r, s)
	})
}

// browserNavigation reports whether a browser sent r navigating to a page
// (Sec-Fetch-Mode: navigate, or Sec-Fetch-Dest: document): a page load or
// a form post, never a script's fetch. Browsers set these headers and pages
// cannot; a script that sets them only gives up its bearer token.
func browserNavigation(r *http.Request) bool {
	return strings.EqualFold(r.Header.Get("Sec-Fetch-Mode"), "navigate") ||
		strings.EqualFold(r.Header.Get("Sec-Fetch-Dest"), "document")
}

// readForm parses r's form, at most maxFormBody bytes, before any field is
// read: a field read from a cut body would be empty, so an oversized login
// would count as a wrong token and an oversized form as a missing CSRF
// token. It answers 413 (too large) or 400 and returns false when it cannot.
func (d *Dashboard) readForm(w http.ResponseWriter, r *http.Request) bool {
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBody)
	err := r.ParseForm()
	if err == nil {
		return true
	}
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		d.fail(w, r, nil, http.StatusRequestEntityTooLarge, fmt.Sprintf("Refused: the form is over %d bytes.", maxFormBody))
	} else {
		d.fail(w, r, nil, http.StatusBadRequest, "Refused: the form could not be read.")
	}
	return false
}

// limit takes an attempt at the token for r's client (AuthLimiter). When it
// has none left it answers 429 with Retry-After (the login form again when
// form is set) and returns false; otherwise the caller calls end with
// whether the token was wrong.
func (d *Dashboard) limit(w http.ResponseWriter, r *http.Request, form *loginPage) (end func(wrong bool), ok bool) {
	end, wait, ok := d.cfg.AuthLimiter.Begin(r)
	if ok {
		return end, true
	}
	after := admin.RetryAfter(wait)
	w.Header().Set("Retry-After", after)
	msg := "Too many wrong tokens from your address: try again in " + after + " s."
	if form != nil {
		form.Error = msg
		d.render(w, r, nil, http.StatusTooManyRequests, "login", "Log in", *form)
	} else {
		d.fail(w, r, nil, http.StatusTooManyRequests, msg)
	}
	return nil, false
}

// loginPage is the data of the login template.
type loginPage struct {
	Next  string
	Error string
}

func (d *Dashboard) loginForm(w http.ResponseWriter, r *http.Request) {
	d.render(w, r, nil, http.StatusOK, "login", "Log in", loginPage{Next: localPath(r.URL.Query().Get("next"))})
}

func (d *Dashboard) login(w http.ResponseWriter, r *http.Request) {
	if err := sameOrigin(r); err != nil {
		d.fail(w, r, nil, http.StatusForbidden, "Refused: the form was not sent from this dashboard.")
		return
	}
	if !d.readForm(w, r) {
		return
	}
	next := localPath(r.PostFormValue("next"))
	end, ok := d.limit(w, r, &loginPage{Next: next})
	if !ok {
		return
	}
	if !d.tokenOK(r.PostFormValue("token")) {
		end(true)
		d.render(w, r, nil, http.StatusUnauthorized, "login", "Log in", loginPage{Next: next, Error: "Wrong token."})
		return
	}
	end(false)
	_, value, err := d.sessions.create()
	if err != nil {
		d.failErr(w, r, nil, err)
		return
	}
	http.SetCookie(w, &http.Cookie{ //nolint:gosec // G124: HttpOnly and SameSite=Strict always; Secure when the browser's connection is TLS (a Secure cookie is never sent back over plain-HTTP localhost)
		Name:     cookieName,
		Value:    value,
		Path:     Prefix,
		MaxAge:   int(d.cfg.SessionTTL / time.Second),
		HttpOnly: true,
		Secure:   browserTLS(r),
		SameSite: http.SameSiteStrictMode,
	})
	http.Redirect(w, r, next, http.StatusSeeOther) //nolint:gosec // G710: next went through localPath: a path under the dashboard, never another host
}

func (d *Dashboard) logout(w http.ResponseWriter, r *http.Request, s *session) {
	if !s.bearer {
		d.sessions.end(s)
	}
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: "", Path: Prefix, MaxAge: -1, HttpOnly: true, //nolint:gosec // G124: HttpOnly and SameSite=Strict always; Secure when the browser's connection is TLS (a Secure cookie is never sent back over plain-HTTP localhost)
		Secure: browserTLS(r), SameSite: http.SameSiteStrictMode})
	http.Redirect(w, r, "/dashboard/login", http.StatusSeeOther)
}

// localPath is p when it is a path under the dashboard (where to go after
// logging in or replaying), else the overview: never another host.
func localPath(p string) string {
	u, err := url.Parse(p)
	if err != nil || u.Scheme != "" || u.Host != "" || u.User != nil || !strings.HasPrefix(u.Path, Prefix) ||
		strings.ContainsAny(p, "\\\r\n") || strings.HasPrefix(p, "//") {
		return Prefix
	}
	return u.RequestURI()
}

// browserTLS reports whether the browser reached the dashboard over TLS: this
// server's own, or a TLS-terminating proxy's that says so (X-Forwarded-Proto
// or Forwarded proto=https). Such a proxy's word needs no trust: it only
// makes the session cookie Secure, which a browser on https sends back and
// keeps off any plain-HTTP request.
func browserTLS(r *http.Request) bool {
	if r.TLS != nil {
		return true
	}
	if p, _, _ := strings.Cut(r.Header.Get("X-Forwarded-Proto"), ","); strings.EqualFold(strings.TrimSpace(p), "https") {
		return true
	}
	first, _, _ := strings.Cut(r.Header.Get("Forwarded"), ",")
	for part := range strings.SplitSeq(first, ";") {
		k, v, _ := strings.Cut(strings.TrimSpace(part), "=")
		if strings.EqualFold(k, "proto") && strings.EqualFold(strings.Trim(v, `"`), "https") {
			return true
		}
	}
	return false
}
