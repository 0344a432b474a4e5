//go:build !fuzzonly

package verify

import (
	"crypto/sha1"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twilio/twilio-go/client"
)

const (
	twilioOldToken = "tw-auth-token-old-000000000000"
)

// twilioForm is a status callback as Twilio posts it, form-encoded in
// Twilio's own (unsorted) order.
var twilioForm = []byte("SmsSid=SM3f1a&SmsStatus=delivered&MessageStatus=delivered&To=%2B15005550001&MessageSid=SM3f1a&AccountSid=AC9b2c&From=%2B15005550006&ApiVersion=2010-04-01")

// twilioOracle is the signature twilio-go's validator accepts: it is
// computed here, then checked with the SDK so the test vector itself is
// the SDK's.
func twilioOracle(t testing.TB, token, u string, body []byte) string {
	t.Helper()
	sig := twilioNodeSignature(token, u, body, false)
	rv := client.NewRequestValidator(token)
	if !rv.ValidateBody(u, body, sig) {
		t.Fatalf("twilio-go rejects the test signature for %s", u)
	}
	return sig
}

// twilioNodeSignature computes Twilio's signature the way twilio-node and
// the Twilio docs describe it, independently of the package: URL, then
// for each parameter name in order each of its values in order, name+value
// (dedup drops repeated identical values, as twilio-node does). For a URL
// with bodySHA256 only the URL is signed.
func twilioNodeSignature(token, u string, body []byte, dedup bool) string {
	s := u
	if !strings.Contains(u, "bodySHA256=") {
		form, err := url.ParseQuery(string(body))
		if err != nil {
			panic(err)
		}
		for _, name := range slices.Sorted(func(yield func(string) bool) {
			for k := range form {
				if !yield(k) {
					return
				}
			}
		}) {
			vals := slices.Clone(form[name])
			slices.Sort(vals)
			if dedup {
				vals = slices.Compact(vals)
			}
			for _, v := range vals {
				s += name + v
			}
		}
	}
	return base64.StdEncoding.EncodeToString(hmacOf(sha1.New, token, s))
}

func twilioHeader(sig string, extra ...string) http.Header {
	h := http.Header{}
	if sig != "" {
		h.Set("X-Twilio-Signature", sig)
	}
	for i := 0; i+1 < len(extra); i += 2 {
		h.Set(extra[i], extra[i+1])
	}
	return h
}

// TestTwilioDocumentedVector is the example of Twilio's "Validating
// requests" guide (auth token 12345), also twilio-go's own test vector.
func TestTwilioDocumentedVector(t *testing.T) {
	t.Parallel()
	const (
		token = "12345"
		u     = "https://mycompany.com/myapp.php?foo=1&bar=2"
		want  = "RSOYDt4T1cUTdK1PDd93/VVr8B8="
	)
	body := []byte("Digits=1234&To=%2B18005551212&From=%2B14158675309&Caller=%2B14158675309&CallSid=CA1234567890ABCDE")
	rv := client.NewRequestValidator(token)
	if !rv.ValidateBody(u, body, want) {
		t.Fatal("twilio-go rejects the documented example")
	}
	if got := twilioNodeSignature(token, u, body, false); got != want {
		t.Fatalf("test oracle = %s, documented %s", got, want)
	}
	h, err := SignTwilio(token, u, body)
	if err != nil || h.Get("X-Twilio-Signature") != want {
		t.Fatalf("SignTwilio = %q, %v; want %s", h.Get("X-Twilio-Signature"), err, want)
	}
	res, err := mustNew(t, Config{Type: "twilio", Secrets: []string{token}}).Verify(&Request{Header: twilioHeader(want), Body: body, URL: u})
	if err != nil {
		t.Fatalf("Verify documented example: %v", err)
	}
	if want := (Result{EventID: syntheticID(body), EventType: "", SecretIndex: 0}); res != want {
		t.Errorf("Verify = %+v, want %+v", res, want)
	}
}

func TestTwilioVerify(t *testing.T) {
	t.Parallel()

	const internal = "http://inlet.internal:8080/webhooks/twilio?tenant=acme"
	valid := twilioOracle(t, twilioToken, twilioPublicURL, twilioForm)
	ok := Result{EventID: "idem-1", EventType: "delivered"}
	idem := func(sig string) http.Header { return twilioHeader(sig, "I-Twilio-Idempotency-Token", "idem-1") }
	signedFor := func(u string, body []byte) http.Header { return idem(twilioOracle(t, twilioToken, u, body)) }

	jsonBody := []byte(`{"event":"call.completed","sid":"CA77","duration":31}`)
	jsonURL, jsonHeader := SignTwilioJSON(twilioToken, twilioPublicURL, jsonBody)
	jsonHeader.Set("I-Twilio-Idempotency-Token", "idem-1")
	// The SDK agrees with SignTwilioJSON.
	if rv := client.NewRequestValidator(twilioToken); !rv.ValidateBody(jsonURL, jsonBody, jsonHeader.Get("X-Twilio-Signature")) {
		t.Fatal("twilio-go rejects SignTwilioJSON output")
	}
	jsonOK := Result{EventID: "idem-1"}

	// Repeated parameters: Twilio signs every value, sorted.
	repeated := []byte("MediaUrl0=https%3A%2F%2Fm%2Fb&Tag=zeta&Tag=alpha&MessageSid=SM1&Tag=mu")
	repeatedSig := twilioNodeSignature(twilioToken, twilioPublicURL, repeated, false)
	unsortedSig := base64.StdEncoding.EncodeToString(hmacOf(sha1.New, twilioToken,
		twilioPublicURL+"MediaUrl0https://m/bMessageSidSM1TagzetaTagalphaTagmu"))
	firstOnlySig := base64.StdEncoding.EncodeToString(hmacOf(sha1.New, twilioToken,
		twilioPublicURL+"MediaUrl0https://m/bMessageSidSM1Tagzeta"))
	dupBody := []byte("A=x&A=x&B=y")

	publicCfg := func(c *Config) { c.PublicURL = "https://hooks.example.com/twilio/sms" }
	withPort := strings.Replace(twilioPublicURL, ".com/", ".com:443/", 1)

	runVerifyCases(t, Config{Type: "twilio", Secrets: []string{twilioToken}}, twilioForm, []verifyCase{
		{name: "sdk validated", header: idem(valid), url: twilioPublicURL, wantRes: ok},
		{name: "our signer", header: func() http.Header {
			h, err := SignTwilio(twilioToken, twilioPublicURL, twilioForm)
			if err != nil {
				t.Fatal(err)
			}
			h.Set("I-Twilio-Idempotency-Token", "idem-1")
			return h
		}(), url: twilioPublicURL, wantRes: ok},
		{name: "body parameter order does not matter", header: idem(valid), url: twilioPublicURL,
			body: []byte("From=%2B15005550006&ApiVersion=2010-04-01&AccountSid=AC9b2c&MessageSid=SM3f1a&To=%2B15005550001&MessageStatus=delivered&SmsStatus=delivered&SmsSid=SM3f1a"), wantRes: ok},
		{name: "synthetic id without token", header: twilioHeader(valid), url: twilioPublicURL, wantRes: Result{EventID: syntheticID(twilioForm), EventType: "delivered"}},
		{name: "no timestamp window", header: idem(valid), url: twilioPublicURL, now: testNow.Add(3 * 365 * 24 * time.Hour), wantRes: ok},
		{name: "rotation new token", secrets: []string{twilioOldToken, twilioToken}, header: idem(valid), url: twilioPublicURL, wantRes: Result{EventID: "idem-1", EventType: "delivered", SecretIndex: 1}},
		{name: "rotation old token", secrets: []string{twilioOldToken, twilioToken}, header: idem(twilioOracle(t, twilioOldToken, twilioPublicURL, twilioForm)), url: twilioPublicURL, wantRes: ok},

		{name: "value byte changed", header: idem(valid), url: twilioPublicURL, body: []byte(strings.Replace(string(twilioForm), "AC9b2c", "AC9b2d", 1)), wantErr: ErrSignatureMismatch},
		{name: "name case changed", header: idem(valid), url: twilioPublicURL, body: []byte(strings.Replace(string(twilioForm), "AccountSid", "Accountsid", 1)), wantErr: ErrSignatureMismatch},
		{name: "parameter added", header: idem(valid), url: twilioPublicURL, body: append([]byte("Extra=1&"), twilioForm...), wantErr: ErrSignatureMismatch},
		{name: "parameter dropped", header: idem(valid), url: twilioPublicURL, body: []byte(strings.Replace(string(twilioForm), "&ApiVersion=2010-04-01", "", 1)), wantErr: ErrSignatureMismatch},
		{name: "signed unsorted is rejected", header: idem(base64.StdEncoding.EncodeToString(hmacOf(sha1.New, twilioToken, twilioPublicURL+"To+1555From+1666"))), url: twilioPublicURL, body: []byte("To=%2B1555&From=%2B1666"), wantErr: ErrSignatureMismatch},
		{name: "path byte changed", header: idem(valid), url: strings.Replace(twilioPublicURL, "/sms", "/smt", 1), wantErr: ErrSignatureMismatch},
		{name: "host changed", header: idem(valid), url: strings.Replace(twilioPublicURL, "hooks.", "hookz.", 1), wantErr: ErrSignatureMismatch},
		{name: "http instead of https", header: idem(valid), url: strings.Replace(twilioPublicURL, "https:", "http:", 1), wantErr: ErrSignatureMismatch},
		{name: "query changed", header: idem(valid), url: strings.Replace(twilioPublicURL, "acme", "acmf", 1), wantErr: ErrSignatureMismatch},
		{name: "query parameter order changed", header: signedFor("https://hooks.example.com/twilio?a=1&b=2", twilioForm), url: "https://hooks.example.com/twilio?b=2&a=1", wantErr: ErrSignatureMismatch},
		{name: "query dropped", header: idem(valid), url: "https://hooks.example.com/twilio/sms", wantErr: ErrSignatureMismatch},
		{name: "one base64 char changed", header: idem(changeBase64At(valid, 3)), url: twilioPublicURL, wantErr: ErrSignatureMismatch},
		{name: "wrong token", secrets: []string{twilioOldToken}, header: idem(valid), url: twilioPublicURL, wantErr: ErrSignatureMismatch},

		{name: "default port added by Twilio", header: signedFor(withPort, twilioForm), url: twilioPublicURL, wantRes: ok},
		{name: "default port added by the proxy", header: idem(valid), url: withPort, wantRes: ok},
		{name: "other port in request", header: idem(valid), url: strings.Replace(twilioPublicURL, ".com/", ".com:8443/", 1), wantRes: ok},
		{name: "http default port", header: signedFor("http://h.example/x", twilioForm), url: "http://h.example:80/x", wantRes: ok},
		{name: "fragment never signed", header: idem(valid), url: twilioPublicURL + "#rc=3", wantRes: ok},

		{name: "public_url replaces scheme host path", cfg: publicCfg, header: idem(valid), url: internal, wantRes: ok},
		{name: "public_url keeps the request query", cfg: publicCfg, header: idem(valid), url: "http://inlet.internal:8080/webhooks/twilio?tenant=acmf", wantErr: ErrSignatureMismatch},
		{name: "public_url with fragment", cfg: func(c *Config) { c.PublicURL = "https://hooks.example.com/twilio/sms#rc=2" }, header: idem(valid), url: internal, wantRes: ok},
		{name: "without public_url behind a proxy", header: idem(valid), url: internal, wantErr: ErrSignatureMismatch},
		{name: "public_url without request URL", cfg: publicCfg, header: signedFor("https://hooks.example.com/twilio/sms", twilioForm), url: "", wantRes: ok},
		{name: "no URL at all", header: idem(valid), url: "", wantErr: ErrSignatureMismatch, wantInErr: "public_url"},

		{name: "json sdk validated", header: jsonHeader, body: jsonBody, url: jsonURL, wantRes: jsonOK},
		{name: "json via public_url", cfg: publicCfg, header: jsonHeader, body: jsonBody, url: "http://inlet.internal:8080/webhooks/twilio?" + strings.SplitN(jsonURL, "?", 2)[1], wantRes: jsonOK},
		{name: "json body byte changed", header: jsonHeader, body: []byte(strings.Replace(string(jsonBody), "31", "32", 1)), url: jsonURL, wantErr: ErrSignatureMismatch, wantInErr: "bodySHA256"},
		{name: "json bodySHA256 changed", header: jsonHeader, body: jsonBody, url: changeHexAt(jsonURL, len(jsonURL)-1), wantErr: ErrSignatureMismatch},
		{name: "json body hash of other body", header: func() http.Header {
			// Genuinely signed URL whose hash does not match the body sent.
			sum := sha256.Sum256([]byte("other"))
			u := twilioPublicURL + "&bodySHA256=" + hex.EncodeToString(sum[:])
			return idem(twilioNodeSignature(twilioToken, u, nil, false))
		}(), body: jsonBody, url: twilioPublicURL + "&bodySHA256=" + func() string { s := sha256.Sum256([]byte("other")); return hex.EncodeToString(s[:]) }(), wantErr: ErrSignatureMismatch},
		{name: "json without bodySHA256 is not form", header: jsonHeader, body: []byte(`{"a":"%zz"}`), url: twilioPublicURL, wantErr: ErrSignatureMismatch},
		{name: "json id path", cfg: func(c *Config) { c.EventIDJSON = "sid" }, header: jsonHeader, body: jsonBody, url: jsonURL, wantRes: Result{EventID: "CA77"}},

		{name: "repeated values all sorted", header: idem(repeatedSig), body: repeated, url: twilioPublicURL, wantRes: Result{EventID: "idem-1"}},
		{name: "repeated values unsorted", header: idem(unsortedSig), body: repeated, url: twilioPublicURL, wantErr: ErrSignatureMismatch},
		{name: "repeated first value only (twilio-go)", header: idem(firstOnlySig), body: repeated, url: twilioPublicURL, wantErr: ErrSignatureMismatch},
		{name: "duplicate value kept", header: idem(twilioNodeSignature(twilioToken, twilioPublicURL, dupBody, false)), body: dupBody, url: twilioPublicURL, wantRes: Result{EventID: "idem-1"}},
		{name: "duplicate value removed (twilio-node)", header: idem(twilioNodeSignature(twilioToken, twilioPublicURL, dupBody, true)), body: dupBody, url: twilioPublicURL, wantRes: Result{EventID: "idem-1"}},
		{name: "empty body", header: signedFor(twilioPublicURL, nil), body: []byte{}, url: twilioPublicURL, wantRes: Result{EventID: "idem-1"}},

		{name: "sid as id by choice", cfg: func(c *Config) { c.EventIDJSON = "MessageSid" }, header: idem(valid), url: twilioPublicURL, wantRes: Result{EventID: "SM3f1a", EventType: "delivered"}},
		{name: "call status type", header: signedFor(twilioPublicURL, []byte("CallSid=CA1&CallStatus=ringing")), body: []byte("CallSid=CA1&CallStatus=ringing"), url: twilioPublicURL, wantRes: Result{EventID: "idem-1", EventType: "ringing"}},
		{name: "idempotency token not UTF-8", header: twilioHeader(valid, "I-Twilio-Idempotency-Token", "\xff\xfe-token"), url: twilioPublicURL, wantErr: ErrMalformedPayload},

		{name: "no signature", header: twilioHeader("", "I-Twilio-Idempotency-Token", "idem-1"), url: twilioPublicURL, wantErr: ErrSignatureMissing},
		{name: "nil header", header: nil, url: twilioPublicURL, wantErr: ErrSignatureMissing},
		{name: "not base64", header: idem(strings.Repeat("*", 27) + "="), url: twilioPublicURL, wantErr: ErrSignatureMalformed},
		{name: "unpadded", header: idem(strings.TrimSuffix(valid, "=")), url: twilioPublicURL, wantErr: ErrSignatureMalformed},
		{name: "sha256 length", header: idem(base64.StdEncoding.EncodeToString(make([]byte, 32))), url: twilioPublicURL, wantErr: ErrSignatureMalformed},
		{name: "body not form-encoded", header: idem(valid), url: twilioPublicURL, body: []byte("a=%zz"), wantErr: ErrSignatureMismatch},
	})
}

// TestTwilioSDKRepeatedParameterTrap pins twilio-go's difference: it
// signs only the first value of a repeated parameter, so it rejects what
// Twilio sends (all values, sorted), which Inlet accepts.
func TestTwilioSDKRepeatedParameterTrap(t *testing.T) {
	t.Parallel()
	body := []byte("Tag=b&Tag=a&MessageSid=SM9")
	sig := twilioNodeSignature(twilioToken, twilioPublicURL, body, false)
	rv := client.NewRequestValidator(twilioToken)
	if rv.ValidateBody(twilioPublicURL, body, sig) {
		t.Log("twilio-go now signs every value of a repeated parameter; the trap is gone")
	}
	v := mustNew(t, Config{Type: "twilio", Secrets: []string{twilioToken}})
	if _, err := v.Verify(&Request{Header: twilioHeader(sig), Body: body, URL: twilioPublicURL}); err != nil {
		t.Fatalf("Verify rejects all-values-sorted: %v", err)
	}
	h, err := SignTwilio(twilioToken, twilioPublicURL, body)
	if err != nil || h.Get("X-Twilio-Signature") != sig {
		t.Errorf("SignTwilio = %q, %v; want the all-values signature %q", h.Get("X-Twilio-Signature"), err, sig)
	}
}

func TestTwilioURLVariants(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want []string
	}{
		{"https://h.example/p?q=1", []string{"https://h.example/p?q=1", "https://h.example:443/p?q=1"}},
		{"https://h.example:443/p", []string{"https://h.example:443/p", "https://h.example/p"}},
		{"http://h.example", []string{"http://h.example", "http://h.example:80"}},
		{"http://h.example:8080?x", []string{"http://h.example:8080?x", "http://h.example?x"}},
		{"https://[::1]/p", []string{"https://[::1]/p", "https://[::1]:443/p"}},
		{"https://[::1]:9/p", []string{"https://[::1]:9/p", "https://[::1]/p"}},
		{"https://u:pw@h.example/p", []string{"https://u:pw@h.example/p", "https://u:pw@h.example:443/p"}},
		{"ws://h.example/p", []string{"ws://h.example/p"}},
		{"no-scheme", []string{"no-scheme"}},
	}
	for _, tt := range tests {
		if got := twilioURLVariants(tt.in); !slices.Equal(got, tt.want) {
			t.Errorf("twilioURLVariants(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestSignTwilioErrors(t *testing.T) {
	t.Parallel()
	if _, err := SignTwilio(twilioToken, twilioPublicURL, []byte("a=%zz")); err == nil || !strings.Contains(err.Error(), "body:") {
		t.Errorf("SignTwilio of a non-form body: %v", err)
	}
	// With bodySHA256 in the URL the body is not parsed.
	u, _ := SignTwilioJSON(twilioToken, twilioPublicURL, []byte(`{"a":1}`))
	if _, err := SignTwilio(twilioToken, u, []byte(`{"a":1}`)); err != nil {
		t.Errorf("SignTwilio JSON URL: %v", err)
	}
	if u2, _ := SignTwilioJSON(twilioToken, "https://h.example/p", nil); !strings.HasPrefix(u2, "https://h.example/p?bodySHA256=e3b0c442") {
		t.Errorf("SignTwilioJSON without a query = %s", u2)
	}
}

// twilioPortRE splits a URL for the fuzz oracle's own port handling.
var twilioPortRE = regexp.MustCompile(`^(https?)://([^/?#@]*@)?(\[[^\]]*\]|[^/?#:]*)(:[^/?#]*)?(.*)$`)

// twilioReallySigned is the fuzz oracle: sig is Twilio's signature of u
// (or u with its port toggled) and body, all values or deduplicated; and
// for a JSON URL the body hashes to bodySHA256.
func twilioReallySigned(token, u, sig string, body []byte) bool {
	u, _, _ = strings.Cut(u, "#")
	urls := []string{u}
	if m := twilioPortRE.FindStringSubmatch(u); m != nil {
		base := m[1] + "://" + m[2] + m[3]
		if m[4] != "" {
			urls = append(urls, base+m[5])
		} else if m[1] == "https" {
			urls = append(urls, base+":443"+m[5])
		} else {
			urls = append(urls, base+":80"+m[5])
		}
	}
	isJSON := false
	if _, q, ok := strings.Cut(u, "?"); ok {
		for _, pair := range strings.Split(q, "&") {
			k, _, _ := strings.Cut(pair, "=")
			if uk, err := url.QueryUnescape(k); err == nil && uk == "bodySHA256" {
				isJSON = true
				break
			}
		}
	}
	if !isJSON {
		if _, err := url.ParseQuery(string(body)); err != nil {
			return false
		}
	}
	for _, cand := range urls {
		for _, dedup := range []bool{false, true} {
			var want string
			if isJSON {
				want = base64.StdEncoding.EncodeToString(hmacOf(sha1.New, token, cand))
			} else {
				want = twilioNodeSignature(token, cand, body, dedup)
			}
			if want != sig {
				continue
			}
			if !isJSON {
				return true
			}
			sum := sha256.Sum256(body)
			q, _ := url.ParseQuery(strings.SplitN(u, "?", 2)[1])
			return strings.EqualFold(q.Get("bodySHA256"), hex.EncodeToString(sum[:]))
		}
	}
	return false
}

func FuzzTwilio(f *testing.F) {
	f.Add(twilioNodeSignature(twilioToken, twilioPublicURL, twilioForm, false), twilioPublicURL, twilioForm, uint(0))
	f.Add("", "https://h.example:443/x?bodySHA256=00", []byte("{}"), uint(9))
	f.Add("AAAAAAAAAAAAAAAAAAAAAAAAAAA=", "http://[::1]:80/?a&b=&=c", []byte("a=1&a=1&b"), uint(77))
	f.Add("x", "", []byte("%"), uint(1<<20))

	secrets := []string{twilioOldToken, twilioToken}
	v := mustNew(f, Config{Type: "twilio", Secrets: secrets})

	f.Fuzz(func(t *testing.T, sig, u string, body []byte, flip uint) {
		req := &Request{Header: twilioHeader(sig), Body: body, URL: u}
		res, err := v.Verify(req)
		if err == nil {
			if !twilioReallySigned(secrets[res.SecretIndex], v.(*twilioVerifier).signedURL(u), sig, body) {
				t.Fatalf("accepted sig %q for URL %q body %q without a genuine signature", sig, u, body)
			}
		} else {
			if Reason(err) == "unknown" {
				t.Fatalf("error without sentinel: %v", err)
			}
			checkErrorSafe(t, err, secrets, req)
		}

		// A genuine signature over the fuzzed body (as form, or as JSON
		// with bodySHA256) is accepted; a flipped body bit is accepted only
		// if the oracle agrees it is still what was signed.
		var h http.Header
		signedURL := "https://hooks.example.com/t?x=1"
		if _, ferr := url.ParseQuery(string(body)); ferr == nil {
			h, err = SignTwilio(twilioToken, signedURL, body)
			if err != nil {
				t.Fatal(err)
			}
		} else {
			signedURL, h = SignTwilioJSON(twilioToken, signedURL, body)
		}
		req = &Request{Header: h, Body: body, URL: signedURL}
		// A type that is not text (a form value of invalid UTF-8) is
		// refused as a malformed payload, after the signature passed.
		if res, err := v.Verify(req); err != nil && !errors.Is(err, ErrMalformedPayload) || err == nil && res.SecretIndex != 1 {
			t.Fatalf("genuine signature: %+v, %v", res, err)
		}
		if len(body) > 0 {
			bad := flipBit(body, flip)
			_, err := v.Verify(&Request{Header: h, Body: bad, URL: signedURL})
			if genuine := twilioReallySigned(twilioToken, signedURL, h.Get("X-Twilio-Signature"), bad); errors.Is(err, ErrSignatureMismatch) == genuine {
				t.Fatalf("flipped body %q: Verify error %v, oracle genuine %v", bad, err, genuine)
			}
		}
		// A changed URL fails unless the oracle agrees the signature still
		// covers it: Twilio concatenates URL and parameters without
		// delimiters, so "…?x=1" + "002" and "…?x=10" + "02" (a repeated
		// parameter de-duplicated, as twilio-node does) are one string.
		changed := signedURL + "0"
		_, err = v.Verify(&Request{Header: h, Body: body, URL: changed})
		if genuine := twilioReallySigned(twilioToken, v.(*twilioVerifier).signedURL(changed), h.Get("X-Twilio-Signature"), body); errors.Is(err, ErrSignatureMismatch) == genuine {
			t.Fatalf("changed URL %q: Verify error %v, oracle genuine %v", changed, err, genuine)
		}
	})
}
