package verify

import (
	"bytes"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// FuzzVerify and FuzzHandshake run over every type Types() lists (and the
// svix alias), presets included, so a provider added to a providers_*.go
// list is fuzzed without a line here. Each builds a genuine request of the
// type (SignTest, or HandshakeTest's probe), mutates one part of it with the
// fuzzer's bytes, and asks the type's fuzzSpec whether accepting the result
// would be a false accept. A type whose test request cannot be built (a key
// preset without its private key) is skipped and logged, never silently.

// fuzzSignKey signs the test request of a public-key preset (Ed25519,
// ECDSA), whose SignTest cannot sign with the public key the source holds:
// SignTestKey with the private key matching presetTestConfig's public key.
func fuzzSignKey(cfg Config, id string, body []byte, requestURL string, now time.Time) (http.Header, []byte, error) {
	key, err := fuzzPrivateKey(cfg.Type)
	if err != nil {
		return nil, nil, err
	}
	return SignTestKey(cfg, key, id, body, requestURL, now)
}

// fuzzHandshakeKey builds the handshake probe of a public-key preset
// (Discord's signed PING) with the same private key.
func fuzzHandshakeKey(cfg Config, requestURL string, now time.Time) (*HandshakeProbe, error) {
	key, err := fuzzPrivateKey(cfg.Type)
	if err != nil {
		return nil, err
	}
	return HandshakeTestKey(cfg, key, requestURL, now)
}

// fuzzPrivateKey is testPrivateKey without a testing.TB.
func fuzzPrivateKey(typ string) (string, error) {
	switch p := presets[typ]; {
	case p != nil && p.scheme == schemeEd25519:
		return hex.EncodeToString(discordTestKey.Seed()), nil
	case p != nil && p.scheme == schemeECDSA:
		der, err := x509.MarshalPKCS8PrivateKey(sendgridTestKey)
		return base64.StdEncoding.EncodeToString(der), err
	}
	return "", fmt.Errorf("type %s: no test private key", typ)
}

// fuzzSpec says what of a request a type's signature covers: a mutated
// request that the verifier accepts must have kept all of it.
type fuzzSpec struct {
	// sigHeaders carry the signature (or the compared token). A changed one
	// may still be accepted while it keeps every token of its original value
	// in order, letter case aside (tokensIntact): a hex signature in upper
	// case, or a second signature element appended, is the same signature.
	sigHeaders []string
	// sigAny: the signature may be in any of sigHeaders (Box's primary and
	// secondary keys): a change is accepted while one of them is intact.
	sigAny bool
	// signedHeaders are signed byte for byte: a timestamp header, Standard
	// Webhooks' webhook-id, a template's {header:Name}.
	signedHeaders []string
	// bodyUnsigned: the scheme does not sign the whole body (see
	// fuzzBodyUnsigned); any change is then allowed, but for bodyPaths.
	bodyUnsigned bool
	// bodyPaths are JSON paths of a body-unsigned scheme whose values are
	// signed (Mailgun's signature.timestamp and token); sigPaths carry the
	// signature itself (Mailgun's signature.signature).
	bodyPaths, sigPaths []string
	// bodyEqual compares two bodies as the scheme signs them (Twilio: the
	// sorted form pairs); nil compares bytes.
	bodyEqual func(a, b []byte) bool
	// signsURL: the request URL is signed.
	signsURL bool
	// portless: the URL is signed without regard to its port (Twilio's
	// SDKs check the URL with its port and without).
	portless bool
	// timestamped: a signed timestamp is checked against the tolerance.
	timestamped bool
	// generic: derived without knowing the scheme (a preset over a scheme
	// other than the HMAC template with no entry in fuzzSpecs): every
	// header but Content-Type and those the preset reads its id, type and
	// time from is a sigHeader, and timestamped is read off the verifier.
	generic bool
}

// fuzzSchemeSpecs are the built-in schemes' specs, from each provider's
// documentation (see docs/providers.md).
var fuzzSchemeSpecs = map[string]fuzzSpec{
	typeGitHub: {sigHeaders: []string{"X-Hub-Signature-256"}},
	// GitLab compares a token: nothing is signed (fuzzBodyUnsigned).
	typeGitLab: {sigHeaders: []string{"X-Gitlab-Token"}, bodyUnsigned: true},
	// signTestConfig("hmac"): X-Acme-Signature over {timestamp}.{body}.
	typeHMAC:    {sigHeaders: []string{"X-Acme-Signature"}, signedHeaders: []string{"X-Acme-Timestamp"}, timestamped: true},
	typePaddle:  {sigHeaders: []string{"Paddle-Signature"}, timestamped: true},
	typeShopify: {sigHeaders: []string{"X-Shopify-Hmac-Sha256"}},
	typeSlack:   {sigHeaders: []string{"X-Slack-Signature"}, signedHeaders: []string{"X-Slack-Request-Timestamp"}, timestamped: true},
	typeStandardWebhooks: {sigHeaders: []string{"Webhook-Signature"},
		signedHeaders: []string{"Webhook-Id", "Webhook-Timestamp"}, timestamped: true},
	typeStripe: {sigHeaders: []string{"Stripe-Signature"}, timestamped: true},
	// Twilio signs the URL and the form's sorted name+value pairs.
	typeTwilio: {sigHeaders: []string{"X-Twilio-Signature"}, signsURL: true, portless: true, bodyEqual: twilioSignedFormEqual},
}

// fuzzSpecs are the specs of presets over schemes other than the HMAC
// template, from each provider's documentation; a preset without one gets
// the generic spec.
var fuzzSpecs = map[string]fuzzSpec{
	// Ed25519 / ECDSA over timestamp + body.
	"discord": {sigHeaders: []string{"X-Signature-Ed25519"}, signedHeaders: []string{"X-Signature-Timestamp"}, timestamped: true},
	"sendgrid": {sigHeaders: []string{"X-Twilio-Email-Event-Webhook-Signature"},
		signedHeaders: []string{"X-Twilio-Email-Event-Webhook-Timestamp"}, timestamped: true},
	// Token compares: nothing is signed; the token must stay.
	"okta":            {sigHeaders: []string{"Authorization"}, bodyUnsigned: true},
	"microsoft-graph": {bodyUnsigned: true, bodyPaths: []string{"value.0.clientState"}},
	// Standard Webhooks with svix-* headers.
	"clerk":  {sigHeaders: []string{"Svix-Signature"}, signedHeaders: []string{"Svix-Id", "Svix-Timestamp"}, timestamped: true},
	"resend": {sigHeaders: []string{"Svix-Signature"}, signedHeaders: []string{"Svix-Id", "Svix-Timestamp"}, timestamped: true},
}

// fuzzBodyUnsigned are the types known not to sign the body, with why: a
// changed body may be accepted. The HMAC template's presets that sign no
// body say so themselves (hmac.bodyUnsigned), and are listed here too for
// the reader. A name that is not (yet) a type is logged.
var fuzzBodyUnsigned = map[string]string{
	"gitlab":          "compares the secret token in X-Gitlab-Token; nothing is signed",
	"mailgun":         "signs only signature.timestamp + signature.token, inside the body",
	"okta":            "compares the Authorization header with the secret; nothing is signed",
	"microsoft-graph": "compares clientState in each notification with the secret; nothing is signed",
}

// specFor returns typ's spec, and for a generic one the headers of its test
// request h, to treat as carrying the signature.
func specFor(typ string, h http.Header) fuzzSpec {
	if typ == typeSvix {
		typ = typeStandardWebhooks
	}
	if s, ok := fuzzSchemeSpecs[typ]; ok {
		return s
	}
	p := presets[typ]
	if s, ok := fuzzSpecs[typ]; ok {
		return s
	}
	if p.scheme == typeHMAC {
		return hmacSpec(p)
	}
	s := fuzzSpec{generic: true}
	_, s.bodyUnsigned = fuzzBodyUnsigned[typ]
	mapped := []string{"Content-Type", p.idHeader, p.typeHeader, p.occurredHeader}
	for name := range h {
		if !slices.ContainsFunc(mapped, func(m string) bool { return m != "" && http.CanonicalHeaderKey(m) == name }) {
			s.sigHeaders = append(s.sigHeaders, name)
		}
	}
	slices.Sort(s.sigHeaders)
	return s
}

// hmacSpec reads the spec of an HMAC template preset off its template.
func hmacSpec(p *preset) fuzzSpec {
	c := p.hmac.withDefaults()
	s := fuzzSpec{bodyUnsigned: c.bodyUnsigned}
	if c.Header != "" {
		s.sigHeaders = append(s.sigHeaders, http.CanonicalHeaderKey(c.Header))
		for _, h := range c.AltHeaders {
			s.sigHeaders = append(s.sigHeaders, http.CanonicalHeaderKey(h))
		}
		s.sigAny = len(c.AltHeaders) > 0
	}
	if c.SignatureJSON != "" {
		s.sigPaths = append(s.sigPaths, c.SignatureJSON)
	}
	if c.TimestampHeader != "" {
		s.signedHeaders = append(s.signedHeaders, http.CanonicalHeaderKey(c.TimestampHeader))
	}
	if c.TimestampJSON != "" {
		s.bodyPaths = append(s.bodyPaths, c.TimestampJSON)
	}
	segs, _ := parseTemplate(c.SignedPayload)
	for _, seg := range segs {
		switch seg.kind {
		case segHeader:
			s.signedHeaders = append(s.signedHeaders, seg.text)
		case segURL:
			s.signsURL = true
		case segJSON:
			s.bodyPaths = append(s.bodyPaths, strings.Join(seg.path, "."))
		}
	}
	s.timestamped = c.TimestampHeader != "" || c.TimestampJSON != "" || c.TimestampKey != ""
	return s
}

// mustReject says why accepting mut, a mutation of orig, would be a false
// accept, or "" when it would not.
func (s fuzzSpec) mustReject(orig, mut *Request) string {
	if !s.bodyUnsigned {
		equal := bytes.Equal
		if s.bodyEqual != nil {
			equal = s.bodyEqual
		}
		if !equal(orig.Body, mut.Body) {
			return "the signed body changed"
		}
	}
	for _, p := range s.bodyPaths {
		path := strings.Split(p, ".")
		a, okA := lookupJSON(orig.Body, path)
		b, okB := lookupJSON(mut.Body, path)
		if a != b || okA != okB {
			return "the signed body field " + p + " changed"
		}
	}
	for _, p := range s.sigPaths {
		path := strings.Split(p, ".")
		a, _ := lookupJSON(orig.Body, path)
		b, _ := lookupJSON(mut.Body, path)
		if !tokensIntact(a, b) {
			return "the signature at " + p + " changed"
		}
	}
	if s.signsURL && normURL(orig.URL, s.portless) != normURL(mut.URL, s.portless) {
		return "the signed URL changed"
	}
	for _, h := range s.signedHeaders {
		if header(orig.Header, h) != header(mut.Header, h) {
			return "the signed header " + h + " changed"
		}
	}
	intact, changed := false, ""
	for _, h := range s.sigHeaders {
		a, b := orig.Header.Get(h), mut.Header.Get(h)
		switch {
		case a == b:
			intact = intact || a != ""
		case !tokensIntact(a, b):
			changed = h
		default:
			intact = true
		}
		if changed != "" && !s.sigAny {
			return "the signature header " + h + " changed"
		}
	}
	if changed != "" && !intact {
		return "every signature header changed"
	}
	return ""
}

// header is h.Get(name), for the "query:NAME" pseudo-headers of withQuery
// too.
func header(h http.Header, name string) string {
	if v := h[name]; len(v) > 0 {
		return v[0]
	}
	return h.Get(name)
}

// tokensIntact reports whether every token of a (a run of letters, digits
// and + / = _ . : -) is in b, in order. A hex token (after an optional
// "key=") may change letter case: schemes accept either case of hex, never
// of base64.
func tokensIntact(a, b string) bool {
	lowerB := asciiLower(b)
	at := 0
	for _, tok := range strings.FieldsFunc(a, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("+/=_.:-", r))
	}) {
		i := strings.Index(b[at:], tok)
		if _, val, _ := strings.Cut(tok, "="); i < 0 && val != "" && strings.Trim(asciiLower(val), "0123456789abcdef") == "" || i < 0 && strings.Trim(asciiLower(tok), "0123456789abcdef") == "" {
			i = strings.Index(lowerB[at:], asciiLower(tok))
		}
		if i < 0 {
			return false
		}
		at += i + len(tok)
	}
	return true
}

// asciiLower lowers ASCII letters only, keeping every byte's place.
func asciiLower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

// normURL drops what no scheme signs of a URL: the fragment, and a default
// port (Twilio's SDKs try the URL with and without it).
func normURL(u string, portless bool) string {
	u, _, _ = strings.Cut(u, "#")
	if portless {
		if vs := twilioURLVariants(u); len(vs) == 2 && len(vs[1]) < len(u) {
			return vs[1] // the port dropped
		}
		return u
	}
	for scheme, port := range map[string]string{"https://": ":443", "http://": ":80"} {
		rest, ok := strings.CutPrefix(u, scheme)
		if !ok {
			continue
		}
		end := strings.IndexAny(rest, "/?")
		if end < 0 {
			end = len(rest)
		}
		if host, ok := strings.CutSuffix(rest[:end], port); ok {
			u = scheme + host + rest[end:]
		}
	}
	return u
}

// twilioSignedFormEqual compares two form bodies as Twilio signs them
// (https://www.twilio.com/docs/usage/security#validating-requests): the
// parameters sorted by name, each name followed by its value, with no
// delimiters. Two bodies whose strings agree carry the same signature by
// the scheme's own design, so accepting one for the other is no false
// accept of Inlet's.
func twilioSignedFormEqual(a, b []byte) bool {
	signed := func(body []byte) (string, bool) {
		form, err := url.ParseQuery(string(body))
		if err != nil {
			return "", false
		}
		var sb strings.Builder
		for _, name := range slices.Sorted(func(yield func(string) bool) {
			for n := range form {
				if !yield(n) {
					return
				}
			}
		}) {
			vals := slices.Clone(form[name])
			slices.Sort(vals)
			for _, v := range vals {
				sb.WriteString(name + v)
			}
		}
		return sb.String(), true
	}
	sa, okA := signed(a)
	sb, okB := signed(b)
	return okA && okB && sa == sb || bytes.Equal(a, b)
}

// mutate applies one of six edits, chosen by op, to b at pos with data:
// replace, insert, xor, truncate, delete, append.
func mutate(b []byte, op uint8, pos uint16, data []byte) []byte {
	out := slices.Clone(b)
	p := int(pos) % (len(out) + 1)
	switch op % 6 {
	case 0:
		return slices.Clone(data)
	case 1:
		return slices.Insert(out, p, data...)
	case 2:
		for i, d := range data {
			if p+i >= len(out) {
				break
			}
			out[p+i] ^= d
		}
		return out
	case 3:
		return out[:p]
	case 4:
		return nil
	default:
		return append(out, data...)
	}
}

// mutateHeader sets header name of h to value mutated (as a client can
// send it), or removes it when nothing sendable is left.
func mutateHeader(h http.Header, value, name string, op uint8, pos uint16, data []byte) {
	if v := textprotoValue(mutate([]byte(value), op, pos, data)); v != "" {
		h.Set(name, v)
	} else {
		h.Del(name)
	}
}

// pick returns name when it is one of names, else one of names chosen by
// name's hash: a corpus entry keeps naming its type or target as the lists
// grow, and the fuzzer's strings still reach every one.
func pick(name string, names []string) string {
	if slices.Contains(names, name) {
		return name
	}
	h := fnv.New32a()
	h.Write([]byte(name))
	return names[h.Sum32()%uint32(len(names))]
}

// timestampTexts are the ways a signing time is written, longest first so
// that replacing one does not leave part of another.
func timestampTexts(t time.Time) []string {
	return []string{
		t.UTC().Format("2006-01-02T15:04:05.000Z07:00"),
		t.UTC().Format(time.RFC3339),
		strconv.FormatInt(t.UnixMilli(), 10),
		strconv.FormatInt(t.Unix(), 10),
	}
}

// shiftTimestamps replaces every signing-time text of now in s with that of
// now+d, as an attacker replaying a request with a fresh timestamp would.
func shiftTimestamps(s string, now time.Time, d time.Duration) string {
	from, to := timestampTexts(now), timestampTexts(now.Add(d))
	pairs := make([]string, 0, 2*len(from))
	for i := range from {
		pairs = append(pairs, from[i], to[i])
	}
	return strings.NewReplacer(pairs...).Replace(s)
}

// textprotoValue is a header value as net/http hands it over: without
// leading and trailing blanks.
func textprotoValue(v []byte) string {
	return strings.Trim(string(v), " \t")
}

// fuzzCase is one type's genuine request and what its signature covers.
type fuzzCase struct {
	typ     string
	cfg     Config
	v       Verifier
	spec    fuzzSpec
	req     Request
	targets []string // "body", "url", "timestamp", the request's header names
}

const fuzzID = "evt_fuzz_1"

// fuzzTypes is every type to fuzz: Types() and the svix alias.
func fuzzTypes() []string { return append(Types(), typeSvix) }

// fuzzConfig is signTestConfig, the svix alias included.
func fuzzConfig(typ string) Config {
	if typ == typeSvix {
		cfg := signTestConfig(typeStandardWebhooks)
		cfg.Type = typeSvix
		return cfg
	}
	return signTestConfig(typ)
}

// fuzzCases builds each type's genuine request; the types that cannot be
// built are logged.
func fuzzCases(tb testing.TB) (map[string]*fuzzCase, []string) {
	tb.Helper()
	cases := map[string]*fuzzCase{}
	var order, skipped []string
	for _, typ := range fuzzTypes() {
		cfg := fuzzConfig(typ)
		h, body, err := SignTest(cfg, fuzzID, nil, twilioPublicURL, testNow)
		if err != nil && UsesPublicKeys(cfg.Type) {
			h, body, err = fuzzSignKey(cfg, fuzzID, nil, twilioPublicURL, testNow)
		}
		if err != nil {
			skipped = append(skipped, typ+" ("+err.Error()+")")
			continue
		}
		v := mustNew(tb, cfg)
		c := &fuzzCase{typ: typ, cfg: cfg, v: v, spec: specFor(typ, h),
			req: Request{Header: h, Body: body, URL: twilioPublicURL, Now: testNow}}
		req := c.req
		if _, err := v.Verify(&req); err != nil {
			tb.Fatalf("%s: the genuine request is refused: %v", typ, err)
		}
		// A signature 10 years old tells whether a timestamp is checked.
		old := c.req
		old.Now = testNow.AddDate(10, 0, 0)
		_, err = v.Verify(&old)
		checked := errors.Is(err, ErrTimestampOutsideTolerance)
		switch {
		case c.spec.generic:
			c.spec.timestamped = checked
		case c.spec.timestamped && !checked:
			tb.Fatalf("%s signs a timestamp, but a request 10 years later gets %v", typ, err)
		case !c.spec.timestamped && err != nil:
			tb.Fatalf("%s signs no timestamp, but a request 10 years later gets %v", typ, err)
		}
		c.targets = append([]string{"body", "url", "timestamp"}, slices.Sorted(func(yield func(string) bool) {
			for name := range h {
				if !yield(name) {
					return
				}
			}
		})...)
		cases[typ] = c
		order = append(order, typ)
	}
	if len(skipped) > 0 {
		tb.Logf("not fuzzed, their test request cannot be signed here: %s", strings.Join(skipped, "; "))
	}
	for name := range fuzzBodyUnsigned {
		if !slices.Contains(fuzzTypes(), name) {
			tb.Logf("fuzzBodyUnsigned lists %s, which is not (yet) a type", name)
		}
	}
	return cases, order
}

// checkRefusal checks what every refusal must be: a zero Result, an error
// with a sentinel, and no secret or request value in its text.
func checkRefusal(t *testing.T, res Result, err error, secrets []string, orig, mut *Request) {
	t.Helper()
	if res != (Result{}) {
		t.Fatalf("refused with a non-zero result %+v (%v)", res, err)
	}
	if Reason(err) == "unknown" {
		t.Fatalf("error without a sentinel: %v", err)
	}
	checkErrorSafe(t, err, secrets, orig)
	// The mutated values too, where long enough not to match by accident.
	long := &Request{Header: http.Header{}}
	if len(mut.Body) >= 24 {
		long.Body = mut.Body
	}
	for name, vals := range mut.Header {
		for _, v := range vals {
			if len(v) >= 24 {
				long.Header.Add(name, v)
			}
		}
	}
	checkErrorSafe(t, err, nil, long)
}

// checkFuzzHandshake checks an answer any handshake may give.
func checkFuzzHandshake(t *testing.T, hs *Handshake, secrets []string) {
	t.Helper()
	if !slices.Contains(HandshakeKinds(), hs.Kind) || hs.ContentType == "" || len(hs.Body) > 4*maxEcho {
		t.Fatalf("handshake answer %q (%s, %d bytes)", hs.Kind, hs.ContentType, len(hs.Body))
	}
	for i, s := range secrets {
		if len(s) >= 8 && bytes.Contains(hs.Body, []byte(s)) {
			t.Fatalf("handshake answer carries secrets[%d]", i)
		}
	}
}

// FuzzVerify mutates one part of a genuine request of a type (its body,
// one header, its signing time, its URL) and checks that the verifier
// never panics, refuses with a sentinel error that leaks nothing, and
// never accepts a request whose signed material changed (fuzzSpec). Each
// run also checks the genuine request at a clock skewed by skew: accepted
// within the tolerance, refused as stale beyond it.
func FuzzVerify(f *testing.F) {
	cases, order := fuzzCases(f)
	for i, typ := range order {
		for j, target := range cases[typ].targets {
			f.Add(typ, target, uint8(i+j), uint16(7*j), []byte("\x01x"), int64(i-j)*int64(time.Minute))
		}
	}
	f.Fuzz(func(t *testing.T, typ, target string, op uint8, pos uint16, data []byte, skew int64) {
		c := cases[pick(typ, order)]
		target = pick(target, c.targets)
		orig := c.req
		mut := Request{Header: orig.Header.Clone(), Body: orig.Body, URL: orig.URL, Now: testNow}
		switch target {
		case "body":
			mut.Body = mutate(orig.Body, op, pos, data)
		case "url":
			mut.URL = string(mutate([]byte(orig.URL), op, pos, data))
		case "timestamp":
			// A fresh signing time within any tolerance, the signature
			// kept: in the headers, the body, or both.
			d := time.Duration(1+int(pos)%59) * time.Second
			if op%2 == 1 {
				d = -d
			}
			if where := op / 2 % 3; where != 1 {
				for _, vals := range mut.Header {
					for i := range vals {
						vals[i] = shiftTimestamps(vals[i], testNow, d)
					}
				}
			}
			if where := op / 2 % 3; where != 0 {
				mut.Body = []byte(shiftTimestamps(string(orig.Body), testNow, d))
			}
		default:
			mutateHeader(mut.Header, orig.Header.Get(target), target, op, pos, data)
		}
		res, err := c.v.Verify(&mut)
		why := c.spec.mustReject(&orig, &mut)
		switch {
		case err != nil:
			checkRefusal(t, res, err, c.cfg.Secrets, &orig, &mut)
		case why != "":
			t.Fatalf("%s: accepted a request where %s (%s mutated: %+v)", c.typ, why, target, res)
		case res.Handshake != nil:
			checkFuzzHandshake(t, res.Handshake, c.cfg.Secrets)
		case res.EventID == "" || !utf8.ValidString(res.EventID) || strings.IndexByte(res.EventID, 0) >= 0:
			t.Fatalf("%s: accepted with event id %q", c.typ, res.EventID)
		}

		// The genuine request, skew away from its signing time.
		d := time.Duration(skew)
		tol := c.cfg.withDefaults().Tolerance
		if op%3 != 0 {
			d %= 3 * tol
		}
		at := orig
		at.Now = testNow.Add(d)
		_, err = c.v.Verify(&at)
		within := d.Abs() <= tol-time.Second
		beyond := d.Abs() > tol+time.Second || d == time.Duration(-1<<63)
		switch {
		case !c.spec.timestamped && err != nil:
			t.Fatalf("%s signs no timestamp, but %s off the signing time: %v", c.typ, d, err)
		case c.spec.timestamped && within && err != nil:
			t.Fatalf("%s: %s off the signing time, tolerance %s: %v", c.typ, d, tol, err)
		case c.spec.timestamped && beyond && !errors.Is(err, ErrTimestampOutsideTolerance):
			t.Fatalf("%s: %s off the signing time, tolerance %s: %v, want timestamp_outside_tolerance", c.typ, d, tol, err)
		}
	})
}

// hsCase is one type's genuine handshake probe.
type hsCase struct {
	typ     string
	cfg     Config
	v       Verifier
	probe   *HandshakeProbe
	req     Request
	spec    fuzzSpec // what authenticates the probe
	targets []string // "body", "method", "query", "query:NAME", header names
}

// handshakeCases builds the probe of each type whose provider sends a
// handshake; the ones that cannot be built are logged.
func handshakeCases(tb testing.TB, events map[string]*fuzzCase) (map[string]*hsCase, []string) {
	tb.Helper()
	cases := map[string]*hsCase{}
	var order, skipped, none []string
	for _, typ := range fuzzTypes() {
		cfg := fuzzConfig(typ)
		probe, err := HandshakeTest(cfg, twilioPublicURL, testNow)
		if err != nil && UsesPublicKeys(cfg.Type) && !strings.Contains(err.Error(), "sends no handshake") {
			probe, err = fuzzHandshakeKey(cfg, twilioPublicURL, testNow)
		}
		switch {
		case err != nil && strings.Contains(err.Error(), "sends no handshake"):
			none = append(none, typ)
			continue
		case err != nil:
			skipped = append(skipped, typ+" ("+err.Error()+")")
			continue
		}
		c := &hsCase{typ: typ, cfg: cfg, v: mustNew(tb, cfg), probe: probe,
			req: Request{Method: probe.Method, URL: probe.URL, Header: probe.Header, Body: probe.Body, Now: testNow}}
		req := c.req
		res, err := c.v.Verify(&req)
		if err != nil || res.Handshake == nil || res.Handshake.Kind != probe.Kind {
			tb.Fatalf("%s: the genuine %s probe gets %+v, %v", typ, probe.Kind, res, err)
		}
		if err := probe.Check(http.StatusOK, http.Header{"Content-Type": {res.Handshake.ContentType}}, res.Handshake.Body); err != nil {
			tb.Fatalf("%s: the answer to the genuine probe: %v", typ, err)
		}
		// A signed kind is authenticated as the type's events are; any kind
		// by a query parameter or header that is the verify token or a
		// secret. An unsigned kind's body is free.
		c.spec = fuzzSpec{bodyUnsigned: true}
		if handshakeSigned(typ, probe.Kind) {
			ev, ok := events[typ]
			if !ok {
				skipped = append(skipped, typ+" (a signed handshake of a type whose events are not fuzzed)")
				continue
			}
			c.spec = ev.spec
			c.spec.signedHeaders = slices.Clone(c.spec.signedHeaders)
		}
		tokens := slices.DeleteFunc(append([]string{cfg.VerifyToken}, cfg.Secrets...), func(s string) bool { return s == "" })
		for name, vals := range query(&c.req) {
			if slices.Contains(tokens, vals[0]) {
				c.spec.signedHeaders = append(c.spec.signedHeaders, "query:"+name)
			}
			c.targets = append(c.targets, "query:"+name)
		}
		for name := range probe.Header {
			if slices.Contains(tokens, probe.Header.Get(name)) {
				c.spec.signedHeaders = append(c.spec.signedHeaders, name)
			}
			c.targets = append(c.targets, name)
		}
		slices.Sort(c.targets)
		c.targets = append([]string{"body", "method", "query"}, c.targets...)
		cases[typ] = c
		order = append(order, typ)
	}
	tb.Logf("no handshake: %s", strings.Join(none, ", "))
	if len(skipped) > 0 {
		tb.Logf("handshakes not fuzzed: %s", strings.Join(skipped, "; "))
	}
	return cases, order
}

// handshakeSigned reports whether typ's handshake of kind carries the
// provider's signature.
func handshakeSigned(typ, kind string) bool {
	if typ == typeSlack {
		return slackHandshake.signed
	}
	for _, k := range presets[typ].handshakes {
		if k.kind == kind {
			return k.signed
		}
	}
	return false
}

// withQuery returns a request whose "query:NAME" pseudo-headers hold the
// URL's query parameters, for fuzzSpec.mustReject to compare.
func withQuery(r *Request) *Request {
	out := *r
	out.Header = r.Header.Clone()
	if out.Header == nil {
		out.Header = http.Header{}
	}
	for name, vals := range query(r) {
		out.Header["query:"+name] = vals
	}
	return &out
}

// FuzzHandshake mutates one part of a genuine handshake probe (its body,
// method, raw query, one query parameter or one header) and checks that
// the verifier never panics, that a refused probe never gets an answer,
// that a probe whose verify token, secret or signed material changed is
// refused, and that an answer is of a known kind and carries no secret.
func FuzzHandshake(f *testing.F) {
	events, _ := fuzzCases(f)
	cases, order := handshakeCases(f, events)
	if len(order) == 0 {
		f.Skip("no type sends a handshake")
	}
	for i, typ := range order {
		for j, target := range cases[typ].targets {
			f.Add(typ, target, uint8(i+j), uint16(3*j), []byte("\x02y"))
		}
	}
	f.Fuzz(func(t *testing.T, typ, target string, op uint8, pos uint16, data []byte) {
		c := cases[pick(typ, order)]
		target = pick(target, c.targets)
		orig := c.req
		mut := Request{Method: orig.Method, URL: orig.URL, Header: orig.Header.Clone(), Body: orig.Body, Now: testNow}
		base, rawQuery, _ := strings.Cut(orig.URL, "?")
		switch {
		case target == "body":
			mut.Body = mutate(orig.Body, op, pos, data)
		case target == "method":
			mut.Method = string(mutate([]byte(orig.Method), op, pos, data))
		case target == "query":
			mut.URL = base + "?" + string(mutate([]byte(rawQuery), op, pos, data))
		case strings.HasPrefix(target, "query:"):
			name := strings.TrimPrefix(target, "query:")
			q := query(&orig)
			q.Set(name, string(mutate([]byte(q.Get(name)), op, pos, data)))
			mut.URL = base + "?" + q.Encode()
		default:
			mutateHeader(mut.Header, orig.Header.Get(target), target, op, pos, data)
		}
		res, err := c.v.Verify(&mut)
		if err != nil {
			checkRefusal(t, res, err, c.cfg.Secrets, &orig, &mut)
			return
		}
		if why := c.spec.mustReject(withQuery(&orig), withQuery(&mut)); why != "" {
			t.Fatalf("%s: %s probe accepted where %s (%s mutated): %+v", c.typ, c.probe.Kind, why, target, res)
		}
		if res.Handshake != nil {
			checkFuzzHandshake(t, res.Handshake, c.cfg.Secrets)
		} else if res.EventID == "" {
			t.Fatalf("%s: a mutated probe accepted as an event without an id", c.typ)
		}
	})
}

// The fuzzers' judge is not vacuous: for every fuzzed type, changing the
// body, each signature or signed header, the signing time or the URL,
// where the type signs it, is a change a verifier must refuse; the
// genuine request and a signature in other letter case are not.
func TestFuzzSpecs(t *testing.T) {
	t.Parallel()
	cases, order := fuzzCases(t)
	for _, typ := range order {
		c := cases[typ]
		orig := &c.req
		mut := func(edit func(r *Request)) *Request {
			r := *orig
			r.Header = orig.Header.Clone()
			edit(&r)
			return &r
		}
		if why := c.spec.mustReject(orig, mut(func(*Request) {})); why != "" {
			t.Errorf("%s: the genuine request: %s", typ, why)
		}
		if c.spec.generic && len(c.spec.sigHeaders) == 0 && c.spec.bodyUnsigned {
			t.Errorf("%s: nothing authenticates its requests", typ)
		}
		// (A body-unsigned scheme with signed fields may have the flipped
		// bit in one of them: Graph's clientState comes early.)
		if why := c.spec.mustReject(orig, mut(func(r *Request) { r.Body = flipBit(r.Body, 9) })); (why == "") != c.spec.bodyUnsigned && (why == "" || len(c.spec.bodyPaths) == 0) {
			t.Errorf("%s: a flipped body bit: %q (body unsigned: %v)", typ, why, c.spec.bodyUnsigned)
		}
		for _, h := range append(slices.Clone(c.spec.sigHeaders), c.spec.signedHeaders...) {
			if orig.Header.Get(h) == "" {
				if !c.spec.sigAny { // Box: one signature per configured key
					t.Errorf("%s: the test request lacks %s, which the spec names", typ, h)
				}
				continue
			}
			if why := c.spec.mustReject(orig, mut(func(r *Request) { r.Header.Set(h, "0") })); why == "" && !c.spec.sigAny {
				t.Errorf("%s: %s replaced is not judged a change", typ, h)
			}
		}
		for _, h := range c.spec.sigHeaders {
			// Hex signatures may change case, base64 ones and tokens not.
			hex := slices.Contains([]string{"github", "hmac", "paddle", "slack", "stripe"}, typ)
			upper := mut(func(r *Request) { r.Header.Set(h, strings.ToUpper(r.Header.Get(h))) })
			if why := c.spec.mustReject(orig, upper); (why == "") != hex && fuzzSchemeSpecs[typ].sigHeaders != nil {
				t.Errorf("%s: %s in upper case: %q", typ, h, why)
			}
		}
		shifted := mut(func(r *Request) {
			for _, vals := range r.Header {
				for i := range vals {
					vals[i] = shiftTimestamps(vals[i], testNow, time.Second)
				}
			}
			r.Body = []byte(shiftTimestamps(string(r.Body), testNow, time.Second))
		})
		if why := c.spec.mustReject(orig, shifted); c.spec.timestamped && why == "" {
			t.Errorf("%s: a signing time moved by 1s is not judged a change", typ)
		}
		if why := c.spec.mustReject(orig, mut(func(r *Request) { r.URL += "x" })); (why != "") != c.spec.signsURL {
			t.Errorf("%s: a changed URL: %q (signs the URL: %v)", typ, why, c.spec.signsURL)
		}
	}
}

func TestFuzzJudgeHelpers(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		a, b string
		want bool
	}{
		{"t=1700000000,v1=abcd", "t=1700000000,v1=ABCD,v0=ff", true},
		{"t=1700000000,v1=abcd", "t=1700000001,v1=abcd", false},
		{"v1,Zm9v+/==", "v1,Zm9v+/== v1,YmFy", true},
		{"sha256=abcd", "", false},
		{"", "anything", true},
		{"sha256=abcd", "SHA256=ABCD", true},
		{"v1,Zm9v", "v1,ZM9V", false}, // base64 is case-sensitive
	} {
		if got := tokensIntact(tt.a, tt.b); got != tt.want {
			t.Errorf("tokensIntact(%q, %q) = %v", tt.a, tt.b, got)
		}
	}
	for in, want := range map[string]string{
		"https://h.example:443/p?q=1#f": "https://h.example/p?q=1",
		"http://h.example:80":           "http://h.example",
		"https://h.example:8443/p":      "https://h.example:8443/p",
	} {
		if got := normURL(in, false); got != want {
			t.Errorf("normURL(%q) = %q, want %q", in, got, want)
		}
	}
	if !twilioSignedFormEqual([]byte("b=2&a=1"), []byte("a=1&b=2&")) || twilioSignedFormEqual([]byte("a=1"), []byte("a=2")) {
		t.Error("twilioSignedFormEqual")
	}
	if got := shiftTimestamps("t=1700000000 ms=1700000000000 at=2023-11-14T22:13:20Z", testNow, time.Second); got != "t=1700000001 ms=1700000001000 at=2023-11-14T22:13:21Z" {
		t.Errorf("shiftTimestamps: %s", got)
	}
}
