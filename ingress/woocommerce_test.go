package ingress_test

import (
	"bytes"
	"crypto/hmac"
	"crypto/md5"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/ingress/verify"
)

// Two WooCommerce events delivered within one second are two stored events.
//
// Regression test (review helper-122; fixed: the text describes the
// behaviour before the fix). The woocommerce preset took the event id from the
// X-WC-Webhook-Delivery-ID header (ingress/verify/providers_hmac.go, the
// woocommerce entry: idHeader "X-WC-Webhook-Delivery-ID"). WooCommerce does
// not make that header unique per event: WC_Webhook::get_new_delivery_id()
// (plugins/woocommerce/includes/class-wc-webhook.php) is
//
//	return wp_hash( $this->get_id() . strtotime( 'now' ) );
//
// a hash of the webhook's id and the current Unix SECOND. Every delivery one
// webhook makes within one second carries the same id: two orders updated in
// the same second, a bulk edit, or the Action Scheduler batch that delivers
// queued webhooks (async delivery is WooCommerce's default) run many
// deliveries per second. Inlet dedupes on (source, external_event_id), so
// the second, third, ... distinct, correctly signed events of that second are
// answered 200 "duplicate" and never stored: WooCommerce marks them
// delivered, nothing retries them, and they are silently lost. (Conversely a
// retry in a later second gets a new id, so the header does not even
// deduplicate retries.)
//
// Expected: two different, correctly signed WooCommerce deliveries are two
// stored events, whatever X-WC-Webhook-Delivery-ID they carry.
func TestWooCommerceSameSecondDeliveriesAreNotDuplicates(t *testing.T) {
	t.Parallel()
	const secret = "woocommerce-webhook-secret"
	b := setupSource(t, "woocommerce", verify.Config{Type: "woocommerce", Secrets: []string{secret}})

	// What WooCommerce computes for webhook 12 in the second both deliveries
	// leave in (wp_hash is an HMAC-MD5 keyed with the site's salt).
	const webhookID = 12
	second := time.Now().Unix()
	salt := hmac.New(md5.New, []byte("site-nonce-salt"))
	salt.Write([]byte(strconv.Itoa(webhookID) + strconv.FormatInt(second, 10)))
	deliveryID := hex.EncodeToString(salt.Sum(nil))

	gmt := time.Unix(second, 0).UTC().Format("2006-01-02T15:04:05")
	for _, orderID := range []int{1234, 1235} {
		// Two different orders updated in the same second (wp_json_encode of
		// the REST order, trimmed), each signed as WC_Webhook::generate_signature
		// does: base64 HMAC-SHA256 of the body with the webhook's secret.
		body := fmt.Appendf(nil, `{"id":%d,"parent_id":0,"status":"completed","currency":"USD","date_created_gmt":%q,"date_modified_gmt":%q,"total":"42.00"}`, orderID, gmt, gmt)
		m := hmac.New(sha256.New, []byte(secret))
		m.Write(body)
		req, err := http.NewRequest(http.MethodPost, b.url+"/webhooks/woocommerce", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header = http.Header{
			"Content-Type":             {"application/json"},
			"User-Agent":               {"WooCommerce/8.9.1 Hookshot (WordPress/6.5.3)"},
			"X-Wc-Webhook-Source":      {"https://shop.example.com/"},
			"X-Wc-Webhook-Topic":       {"order.updated"},
			"X-Wc-Webhook-Resource":    {"order"},
			"X-Wc-Webhook-Event":       {"updated"},
			"X-Wc-Webhook-Signature":   {base64.StdEncoding.EncodeToString(m.Sum(nil))},
			"X-Wc-Webhook-Id":          {strconv.Itoa(webhookID)},
			"X-Wc-Webhook-Delivery-Id": {deliveryID},
		}
		code, answer, _ := do(t, req)
		if code != http.StatusOK {
			t.Fatalf("order %d: genuine WooCommerce delivery answered %d %s", orderID, code, answer)
		}
		t.Logf("order %d: %d %s", orderID, code, answer)
	}

	n := storedOf(t, b, "woocommerce")
	if n != 2 {
		t.Errorf("two distinct WooCommerce events (orders 1234 and 1235) delivered in the same second: %d stored, want 2 "+
			"(the second was answered \"duplicate\" because both carry the X-WC-Webhook-Delivery-ID WooCommerce derives from the webhook id and the current second; it is lost)", n)
	}
}
