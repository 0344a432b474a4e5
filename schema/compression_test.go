package schema_test

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/inlet-dev/inlet/internal/pgtest"
)

// Where the server has lz4, every events partition (those migrate made and
// those made later) compresses payload and raw_body with it, and a body large
// enough to be compressed reads back byte for byte.
func TestEventsCompressWithLZ4(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	var lz4 bool
	if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_settings
		WHERE name = 'default_toast_compression' AND 'lz4' = ANY(enumvals))`).Scan(&lz4); err != nil {
		t.Fatal(err)
	}
	if !lz4 {
		t.Skip("this PostgreSQL is built without lz4")
	}
	if _, err := pool.Exec(ctx, `SELECT webhook_ingress.create_partitions('week', 8)`); err != nil {
		t.Fatal(err)
	}
	rows, err := pool.Query(ctx, `SELECT c.relname || '.' || a.attname || '=' || a.attcompression::text
		FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid
		WHERE a.attname IN ('payload', 'raw_body')
		  AND (c.oid = 'webhook_ingress.events'::regclass
		       OR c.oid IN (SELECT inhrelid FROM pg_inherits WHERE inhparent = 'webhook_ingress.events'::regclass))
		ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	var n int
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		n++
		if !strings.HasSuffix(s, "=l") {
			t.Errorf("%s: want l (lz4)", s)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if n < 8 { // parent, default and at least this week and two ahead, two columns each
		t.Fatalf("only %d events columns checked", n)
	}

	body := []byte(`{"id":"evt_lz4","object":"event","data":{"object":{"note":"` + strings.Repeat("compressible ", 800) + `"}}}`)
	var id int64
	if err := pool.QueryRow(ctx, `INSERT INTO webhook_ingress.events
		(provider, scheme, external_event_id, raw_body, signature_verified, payload)
		VALUES ('stripe', 'stripe', 'evt_lz4', $1, true, convert_from($1, 'UTF8')::jsonb) RETURNING id`, body).Scan(&id); err != nil {
		t.Fatal(err)
	}
	var back []byte
	var method string
	if err := pool.QueryRow(ctx, `SELECT raw_body, coalesce(pg_column_compression(payload), '') FROM webhook_ingress.events WHERE id = $1`, id).Scan(&back, &method); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(back, body) {
		t.Fatal("raw_body did not read back byte for byte")
	}
	if method != "lz4" {
		t.Fatalf("payload compressed with %q, want lz4", method)
	}
}
