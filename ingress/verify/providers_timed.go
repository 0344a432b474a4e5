package verify

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// timedProviders are the HMAC presets that sign a timestamp, the URL or
// other headers besides the body, or sign inside the body.
var timedProviders = []*preset{
	{
		name:   "zoom",
		scheme: typeHMAC,
		hmac: HMACConfig{Header: "x-zm-signature", Prefix: "v0=", TimestampHeader: "x-zm-request-timestamp",
			SignedPayload: "v0:{timestamp}:{body}"},
		// Zoom sends no event id (x-zm-trackingid names one delivery, and
		// payload.object.uuid is the meeting's, shared by its events): the
		// synthetic body hash deduplicates Zoom's retries of the same bytes.
		typeJSON:     "event",
		occurredJSON: "event_ts",
		handshakes:   []handshakeKind{hsZoom()},
		sample: func(id string, now time.Time) (http.Header, []byte) {
			return nil, fmt.Appendf(nil, `{"event":"meeting.started","event_ts":%d,"payload":{"account_id":"AAAAAABBBB","object":{"id":"89534827310","uuid":%q,"host_id":"x1yCzABCDEfg23HiJKl4mN","topic":"Weekly sync","type":2,"start_time":%q,"timezone":"Europe/Paris","duration":30}}}`,
				now.UnixMilli(), id, now.UTC().Format(time.RFC3339))
		},
		doc: PresetDoc{
			Provider:  "Zoom",
			Headers:   "x-zm-signature, x-zm-request-timestamp",
			Signed:    "v0= hex HMAC-SHA256(secret token, \"v0:{timestamp}:{body}\"); ±5 min",
			ID:        "none (synthetic body hash)",
			Type:      "body event",
			Occurred:  "body event_ts (ms)",
			Handshake: "POST endpoint.url_validation (signed) answered {plainToken, encryptedToken = hex HMAC-SHA256(secret token, plainToken)}",
			Source:    "type: zoom\nsecrets: [\"${ZOOM_WEBHOOK_SECRET_TOKEN}\"]",
			Docs:      "https://developers.zoom.us/docs/api/webhooks/",
		},
	},
	{
		name:   "twitch",
		scheme: typeHMAC,
		hmac: HMACConfig{Header: "Twitch-Eventsub-Message-Signature", Prefix: "sha256=",
			TimestampHeader: twitchTimestamp, TimestampFormat: timestampRFC3339,
			SignedPayload: "{header:" + twitchMessageID + "}{timestamp}{body}"},
		tolerance:      10 * time.Minute,
		idHeader:       twitchMessageID,
		typeHeader:     twitchSubscriptionType,
		occurredHeader: twitchTimestamp,
		handshakes:     []handshakeKind{hsTwitch()},
		event:          twitchEvent,
		sample: func(id string, now time.Time) (http.Header, []byte) {
			h := http.Header{
				twitchMessageID:                        {id},
				"Twitch-Eventsub-Message-Retry":        {"0"},
				twitchMessageType:                      {"notification"},
				twitchSubscriptionType:                 {"channel.follow"},
				"Twitch-Eventsub-Subscription-Version": {"2"},
			}
			return h, fmt.Appendf(nil, `{"subscription":{"id":"f1c2a387-161a-49f9-a165-0f21d7a4e1c4","type":"channel.follow","version":"2","status":"enabled","cost":0,"condition":{"broadcaster_user_id":"1337","moderator_user_id":"1337"},"transport":{"method":"webhook","callback":"https://example.com/webhooks/callback"},"created_at":"2019-11-16T10:11:12.634234626Z"},"event":{"user_id":"1234","user_login":"cool_user","user_name":"Cool_User","broadcaster_user_id":"1337","broadcaster_user_login":"cooler_user","broadcaster_user_name":"Cooler_User","followed_at":%q}}`,
				now.UTC().Format(time.RFC3339Nano))
		},
		doc: PresetDoc{
			Provider:  "Twitch EventSub",
			Headers:   "Twitch-Eventsub-Message-Signature, Twitch-Eventsub-Message-Id, Twitch-Eventsub-Message-Timestamp",
			Signed:    "sha256= hex HMAC-SHA256(secret, message id + timestamp + body); RFC 3339 timestamp, ±10 min",
			ID:        "Twitch-Eventsub-Message-Id (the same on a resend)",
			Type:      "Twitch-Eventsub-Subscription-Type; a revocation is stored as \"revocation.<subscription type>\"",
			Occurred:  "Twitch-Eventsub-Message-Timestamp (when sent)",
			Handshake: "POST webhook_callback_verification (signed) answered with the challenge as text/plain",
			Source:    "type: twitch\nsecrets: [\"${TWITCH_EVENTSUB_SECRET}\"]   # the transport.secret of your subscriptions",
			Docs:      "https://dev.twitch.tv/docs/eventsub/handling-webhook-events/",
		},
	},
	{
		name:   "x",
		scheme: typeHMAC,
		hmac:   HMACConfig{Header: "x-twitter-webhooks-signature", Prefix: "sha256=", Encoding: "base64"},
		// X sends no event id: the synthetic body hash deduplicates.
		handshakes: []handshakeKind{hsCRC()},
		event:      xEvent,
		sample: func(id string, now time.Time) (http.Header, []byte) {
			return nil, fmt.Appendf(nil, `{"for_user_id":"2244994945","tweet_create_events":[{"created_at":%q,"id_str":%q,"text":"hello from inlet","user":{"id_str":"2244994945","screen_name":"XDevelopers"},"timestamp_ms":"%d"}]}`,
				now.UTC().Format("Mon Jan 02 15:04:05 -0700 2006"), id, now.UnixMilli())
		},
		doc: PresetDoc{
			Provider:  "X (Twitter) Account Activity API",
			Headers:   "x-twitter-webhooks-signature",
			Signed:    "sha256= base64 HMAC-SHA256(consumer secret, body); no timestamp",
			ID:        "none (synthetic body hash)",
			Type:      "the body's first *_events key (or user_event; data.event_type for X Activity API payloads)",
			Occurred:  "none",
			Handshake: "GET crc_token answered {response_token: sha256= base64 HMAC-SHA256(consumer secret, crc_token)}, keyed with the secret the newest stored (not duplicate) event used (the first listed until one arrives, also after a restart: during a rotation list the secret X signs with first); only token-shaped crc_tokens are answered, and events must be JSON objects, so the answer cannot sign a forged event",
			Source:    "type: x\nsecrets: [\"${X_CONSUMER_SECRET}\"]   # the app's API key secret",
			Docs:      "https://docs.x.com/x-api/webhooks/quickstart",
		},
	},
	{
		name:   "calendly",
		scheme: typeHMAC,
		hmac: HMACConfig{Header: "Calendly-Webhook-Signature", Separator: ",", SignatureKey: "v1", TimestampKey: "t",
			SignedPayload: "{timestamp}.{body}"},
		tolerance: 3 * time.Minute,
		// Calendly sends no event id, and payload.uri names the invitee, the
		// same in invitee.created and invitee.canceled: the synthetic body
		// hash is the id.
		typeJSON:     "event",
		occurredJSON: "created_at",
		sample: func(id string, now time.Time) (http.Header, []byte) {
			ts := now.UTC().Format("2006-01-02T15:04:05.000000Z")
			return nil, fmt.Appendf(nil, `{"created_at":%q,"created_by":"https://api.calendly.com/users/AAAAAAAAAAAAAAAA","event":"invitee.created","payload":{"email":"test@example.com","name":"John Doe","status":"active","uri":"https://api.calendly.com/scheduled_events/GBGBDCAADAEDCRZ2/invitees/%s","scheduled_event":{"uri":"https://api.calendly.com/scheduled_events/GBGBDCAADAEDCRZ2","name":"15 Minute Meeting","start_time":%q},"created_at":%q,"updated_at":%q}}`,
				ts, id, ts, ts, ts)
		},
		doc: PresetDoc{
			Provider: "Calendly",
			Headers:  "Calendly-Webhook-Signature: t=…,v1=…",
			Signed:   "v1 = hex HMAC-SHA256(signing key, \"{t}.{body}\"); ±3 min",
			ID:       "none (synthetic body hash; payload.uri is the invitee's, shared by its events)",
			Type:     "body event",
			Occurred: "body created_at",
			Source:   "type: calendly\nsecrets: [\"${CALENDLY_WEBHOOK_SIGNING_KEY}\"]",
			Docs:     "https://developer.calendly.com/api-docs/overview/webhooks/webhook-signatures",
		},
	},
	{
		name:   "mux",
		scheme: typeHMAC,
		hmac: HMACConfig{Header: "Mux-Signature", Separator: ",", SignatureKey: "v1", TimestampKey: "t",
			SignedPayload: "{timestamp}.{body}"},
		idJSON:       "id",
		typeJSON:     "type",
		occurredJSON: "created_at",
		sample: func(id string, now time.Time) (http.Header, []byte) {
			return nil, fmt.Appendf(nil, `{"type":"video.asset.ready","object":{"type":"asset","id":"0201p02fGKPE7MrbC269XRD7LpcHhrmbu0002"},"id":%q,"environment":{"name":"Production","id":"j0863n"},"data":{"status":"ready","playback_ids":[{"policy":"public","id":"Q4NiXq5mnlWMTLWHNDnuo2Gd7qJbd01a"}],"id":"0201p02fGKPE7MrbC269XRD7LpcHhrmbu0002","duration":23.8},"created_at":%q,"accessor_source":null,"accessor":null,"request_id":null}`,
				id, now.UTC().Format("2006-01-02T15:04:05.000000Z"))
		},
		doc: PresetDoc{
			Provider: "Mux",
			Headers:  "Mux-Signature: t=…,v1=…",
			Signed:   "v1 = hex HMAC-SHA256(signing secret, \"{t}.{body}\"); ±5 min",
			ID:       "body id",
			Type:     "body type",
			Occurred: "body created_at",
			Source:   "type: mux\nsecrets: [\"${MUX_WEBHOOK_SECRET}\"]",
			Docs:     "https://www.mux.com/docs/core/listen-for-webhooks",
		},
	},
	{
		name:   "hubspot",
		scheme: typeHMAC,
		hmac: HMACConfig{Header: "X-HubSpot-Signature-v3", Encoding: "base64",
			TimestampHeader: "X-HubSpot-Request-Timestamp", TimestampFormat: timestampUnixMS,
			SignedPayload: "{method}{url}{body}{timestamp}", urlUnescape: hubspotURI},
		signsURL: true,
		// The body is a batch of up to 100 events; a retry sends them
		// again with attemptNumber raised, so the body's hash would store a
		// retry anew (review helper-124): the id is the hash of the batch
		// without attemptNumber (hubspotEvent), the same across retries of
		// the same batch. A retry that batches them differently is stored
		// again: handlers deduplicate by eventId.
		typeJSON:     "0.subscriptionType",
		occurredJSON: "0.occurredAt",
		formerIDs:    func(_ http.Header, body []byte) []string { return []string{syntheticID(body)} }, // the body's hash, before
		// Nothing separates the URL from the body in the signed string, so
		// bytes move between a query's end and the body's start without
		// changing it; a batch is always a JSON array, and no text moved
		// either way leaves one (hubspotEvent).
		event: hubspotEvent,
		sample: func(id string, now time.Time) (http.Header, []byte) {
			// The id picks the eventId: HubSpot's id is the batch's.
			h := fnv.New64a()
			h.Write([]byte(id))
			return nil, fmt.Appendf(nil, `[{"eventId":%d,"subscriptionId":2150032,"portalId":62515,"appId":1160452,"occurredAt":%d,"subscriptionType":"contact.propertyChange","attemptNumber":0,"objectId":1246965,"propertyName":"lifecyclestage","propertyValue":%q,"changeFlag":"UPDATED","changeSource":"CRM","sourceId":"userId:1234567"}]`,
				h.Sum64()%1e12, now.UnixMilli(), id)
		},
		doc: PresetDoc{
			Provider: "HubSpot (signature v3)",
			Headers:  "X-HubSpot-Signature-v3, X-HubSpot-Request-Timestamp",
			Signed:   "base64 HMAC-SHA256(client secret, method + URL + body + timestamp), URL with %3A %2F %3F %40 %21 %24 %27 %28 %29 %2A %2C %3B decoded; timestamp in ms, ±5 min",
			ID:       "hash of the batch without its attemptNumbers (a retry raises them)",
			Type:     "body [0].subscriptionType",
			Occurred: "body [0].occurredAt (ms)",
			Source:   "type: hubspot\nsecrets: [\"${HUBSPOT_CLIENT_SECRET}\"]\npublic_url: https://hooks.example.com/webhooks/hubspot   # the target URL set in HubSpot, when behind a proxy",
			Docs:     "https://developers.hubspot.com/docs/apps/developer-platform/build-apps/authentication/request-validation",
		},
	},
	{
		name:     "square",
		scheme:   typeHMAC,
		hmac:     HMACConfig{Header: "x-square-hmacsha256-signature", Encoding: "base64", SignedPayload: "{url}{body}"},
		signsURL: true,
		// No timestamp is signed: replay protection is event_id's dedupe.
		idJSON:       "event_id",
		typeJSON:     "type",
		occurredJSON: "created_at",
		sample: func(id string, now time.Time) (http.Header, []byte) {
			return nil, fmt.Appendf(nil, `{"merchant_id":"6SSW7HV8K2ST5","type":"payment.created","event_id":%q,"created_at":%q,"data":{"type":"payment","id":"KkAkhdMsgzn59SM8A89WgKwekxLZY","object":{"payment":{"id":"KkAkhdMsgzn59SM8A89WgKwekxLZY","amount_money":{"amount":100,"currency":"USD"},"status":"APPROVED","location_id":"S8GWD5R9QB376"}}}}`,
				id, now.UTC().Format("2006-01-02T15:04:05.000Z"))
		},
		doc: PresetDoc{
			Provider: "Square",
			Headers:  "x-square-hmacsha256-signature",
			Signed:   "base64 HMAC-SHA256(signature key, notification URL + body); no timestamp",
			ID:       "body event_id",
			Type:     "body type",
			Occurred: "body created_at",
			Source:   "type: square\nsecrets: [\"${SQUARE_WEBHOOK_SIGNATURE_KEY}\"]\npublic_url: https://hooks.example.com/webhooks/square   # the notification URL exactly as registered in Square",
			Docs:     "https://developer.squareup.com/docs/webhooks/step3validate",
		},
	},
	{
		name:   "box",
		scheme: typeHMAC,
		hmac: HMACConfig{Header: "box-signature-primary", AltHeaders: []string{"box-signature-secondary"}, Encoding: "base64",
			TimestampHeader: "box-delivery-timestamp", TimestampFormat: timestampRFC3339, SignedPayload: "{body}{timestamp}"},
		tolerance: 10 * time.Minute,
		// Box's BOX-DELIVERY-ID changes on every retry; the body's id stays.
		idJSON:       "id",
		typeJSON:     "trigger",
		occurredJSON: "created_at",
		sample: func(id string, now time.Time) (http.Header, []byte) {
			h := http.Header{
				"Box-Delivery-Id":         {"673a081b-bb4b-4d45-b4f1-4131a29c1d07"},
				"Box-Signature-Version":   {"1"},
				"Box-Signature-Algorithm": {"HmacSHA256"},
			}
			return h, fmt.Appendf(nil, `{"type":"webhook_event","id":%q,"created_at":%q,"trigger":"FILE.UPLOADED","webhook":{"id":"1234567890","type":"webhook"},"created_by":{"type":"user","id":"2345678901","name":"Aaron Levie","login":"aaron@example.com"},"source":{"id":"123456789","type":"file","name":"Test.txt"}}`,
				id, now.UTC().Format(time.RFC3339))
		},
		doc: PresetDoc{
			Provider: "Box",
			Headers:  "box-signature-primary, box-signature-secondary, box-delivery-timestamp",
			Signed:   "base64 HMAC-SHA256(primary or secondary key, body + timestamp); RFC 3339 timestamp, ±10 min",
			ID:       "body id (BOX-DELIVERY-ID changes on each retry)",
			Type:     "body trigger",
			Occurred: "body created_at",
			Source:   "type: box\nsecrets: [\"${BOX_PRIMARY_KEY}\", \"${BOX_SECONDARY_KEY}\"]",
			Docs:     "https://developer.box.com/guides/webhooks/v2/signatures-v2/",
		},
	},
	{
		name:   "mailgun",
		scheme: typeHMAC,
		hmac: HMACConfig{SignatureJSON: "signature.signature", TimestampJSON: "signature.timestamp",
			SignedPayload: "{timestamp}{json:signature.token}", bodyUnsigned: true,
			altSignatureJSON: []string{"signature.parent-signature"}},
		// Mailgun resends a failed webhook with its original signature for
		// up to 8 hours, and warns against a strict timestamp check; the
		// token, being the event id, already refuses a second use of one
		// signature.
		tolerance:    9 * time.Hour,
		idJSON:       "signature.token",
		typeJSON:     "event-data.event",
		occurredJSON: "event-data.timestamp",
		sample: func(id string, now time.Time) (http.Header, []byte) {
			return nil, fmt.Appendf(nil, `{"signature":{"token":%q},"event-data":{"id":"CPgfbmQMTCKtHW6uIWtuVe","timestamp":%d.%06d,"log-level":"info","event":"delivered","recipient":"alice@example.com","recipient-domain":"example.com","message":{"headers":{"to":"Alice <alice@example.com>","message-id":"20130503182626.18666.16540@sandbox.mailgun.org","from":"Bob <bob@sandbox.mailgun.org>","subject":"Test delivered webhook"},"size":111},"delivery-status":{"code":250,"message":"OK","attempt-no":1},"flags":{"is-routed":false,"is-authenticated":true,"is-test-mode":false}}}`,
				id, now.Unix(), now.Nanosecond()/1000)
		},
		sign: signMailgun,
		doc: PresetDoc{
			Provider: "Mailgun",
			Headers:  "none: body signature.{timestamp, token, signature} (or parent-signature)",
			Signed:   "hex HMAC-SHA256(webhook signing key, timestamp + token), in the body; the event-data is NOT covered by Mailgun's signature; ±9 h (Mailgun resends the original signature for 8 h)",
			ID:       "body signature.token (a replayed signature is a duplicate)",
			Type:     "body event-data.event",
			Occurred: "body event-data.timestamp",
			Source:   "type: mailgun\nsecrets: [\"${MAILGUN_WEBHOOK_SIGNING_KEY}\"]",
			Docs:     "https://documentation.mailgun.com/docs/mailgun/user-manual/webhooks/securing-webhooks",
		},
	},
}

// Twitch EventSub's headers.
const (
	twitchMessageID        = "Twitch-Eventsub-Message-Id"
	twitchTimestamp        = "Twitch-Eventsub-Message-Timestamp"
	twitchSubscriptionType = "Twitch-Eventsub-Subscription-Type"
)

// twitchEvent stores a revocation (Twitch-Eventsub-Message-Type:
// revocation) under the type "revocation.<subscription type>", so that a
// handler of channel.follow or channel.* never receives one by accident and
// "revocation.*" receives them all.
func twitchEvent(req *Request, res Result, customType bool) (Result, error) {
	if customType || req.Header.Get(twitchMessageType) != "revocation" {
		return res, nil
	}
	typ := res.EventType
	if typ == "" {
		typ, _ = lookupJSON(req.Body, []string{"subscription", "type"})
	}
	if strings.IndexByte(typ, 0) >= 0 { // lookupJSON's strings are valid UTF-8
		return Result{}, fmt.Errorf("twitch: %w: subscription.type is not text", ErrMalformedPayload)
	}
	res.EventType = "revocation." + typ
	return res, nil
}

// hubspotEvent refuses a HubSpot body that is not a JSON array. HubSpot
// always sends one (a batch of events), and its signed string joins URL and
// body with nothing between: a captured delivery re-split between the
// query's end and the body's start (?portalId=6251 and 5[…] for
// ?portalId=62515 and […]) verifies, and its body hash would be a new event
// id. A proper suffix of a JSON array is not one, nor is text before one
// (a request target holds no whitespace).
func hubspotEvent(req *Request, res Result, _ bool) (Result, error) {
	if !jsonArray(req.Body) || !json.Valid(req.Body) {
		return Result{}, fmt.Errorf("hubspot: %w: the body is not a JSON array of events", ErrMalformedPayload)
	}
	if res.EventID == syntheticID(req.Body) { // no event_id_* of the source's own
		if id := hubspotBatchID(req.Body); id != "" {
			res.EventID = id
		}
	}
	return res, nil
}

// hubspotBatchID is "hubspot:" and the hex SHA-256 of the batch with each
// event's attemptNumber left out (the one field a retry changes), its keys
// in order; "" when the body is not an array of objects (the body's hash is
// the id then). Not the events' eventIds alone: HubSpot does not promise
// them unique (every portal of an app shares its subscriptionIds), and two
// events sharing them would be one (review helper-126).
func hubspotBatchID(body []byte) string {
	var events []map[string]json.RawMessage
	if err := json.Unmarshal(body, &events); err != nil || len(events) == 0 {
		return ""
	}
	for _, e := range events {
		if e == nil {
			return ""
		}
		delete(e, "attemptNumber")
	}
	canon, err := json.Marshal(events) // map keys sorted
	if err != nil {
		return ""
	}
	sum := sha256.Sum256(canon)
	return "hubspot:" + hex.EncodeToString(sum[:])
}

// xEvent refuses an X event that is not a JSON object (an X event always
// is; the only other text the consumer secret signs is a CRC answer) and
// types it by its first "*_events" key.
func xEvent(req *Request, res Result, customType bool) (Result, error) {
	if !jsonObject(req.Body) {
		return Result{}, fmt.Errorf("x: %w: the body is not a JSON object", ErrMalformedPayload)
	}
	if !customType {
		res.EventType = xEventType(req.Body)
	}
	return res, nil
}

// xEventType is the first top-level key of an Account Activity event that
// names its events ("tweet_create_events", "follow_events", …, or
// "user_event" for a revoked authorization), else an X Activity API
// payload's data.event_type, else "".
func xEventType(body []byte) string {
	d := json.NewDecoder(bytes.NewReader(body))
	if t, err := d.Token(); err != nil || t != json.Delim('{') {
		return ""
	}
	for d.More() {
		t, err := d.Token()
		if err != nil {
			return ""
		}
		key, _ := t.(string)
		if strings.HasSuffix(key, "_events") || key == "user_event" {
			return key
		}
		var skip json.RawMessage
		if d.Decode(&skip) != nil {
			return ""
		}
	}
	typ, _ := lookupJSON(body, []string{"data", "event_type"})
	return typ
}

// hubspotURI decodes the %-escapes HubSpot decodes in the URI it signs
// (signature v3), in either case of hex digit.
var hubspotURI = func() *strings.Replacer {
	var pairs []string
	for _, c := range ":/?@!$'()*,;" {
		enc := fmt.Sprintf("%%%02X", c)
		pairs = append(pairs, enc, string(c), strings.ToLower(enc), string(c))
	}
	return strings.NewReplacer(pairs...)
}()

// signMailgun signs a Mailgun webhook: it writes signature.{timestamp,
// token, signature} into body (a JSON object), keeping a token already
// there (the sample's event id) or deriving one from the body.
func signMailgun(_ Config, secret string, now time.Time, _ http.Header, body []byte, _, _ string) ([]byte, error) {
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(body, &doc); err != nil || doc == nil {
		return nil, errors.New("body: not a JSON object to put Mailgun's signature into")
	}
	token, _ := lookupJSON(body, []string{"signature", "token"})
	if token == "" {
		sum := sha256.Sum256(body)
		token = hex.EncodeToString(sum[:25]) // Mailgun's tokens are 50 characters
	}
	sig := map[string]string{"timestamp": strconv.FormatInt(now.Unix(), 10), "token": token}
	set := func() ([]byte, error) {
		raw, err := json.Marshal(sig)
		if err != nil {
			return nil, err
		}
		doc["signature"] = raw
		return json.Marshal(doc)
	}
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(sig["timestamp"] + sig["token"]))
	sig["signature"] = hex.EncodeToString(mac.Sum(nil))
	return set()
}
