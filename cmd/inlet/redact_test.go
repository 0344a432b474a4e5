package main

import (
	"strings"
	"testing"
)

func TestRedactURL(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"postgres://inlet:s3cret@db:5432/inlet?sslmode=disable", "postgres://inlet:xxxxx@db:5432/inlet?sslmode=disable"},
		{"postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable", "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"},
		{"postgresql://db/inlet?user=inlet&password=s3cret&sslmode=require", "postgresql://db/inlet?user=inlet&password=xxxxx&sslmode=require"},
		{"postgres://db/inlet?sslpassword=s3cret", "postgres://db/inlet?sslpassword=xxxxx"},
		{"postgres://u:p%40ss@db/x", "postgres://u:xxxxx@db/x"},
		{"host=db user=inlet password=s3cret dbname=inlet", "host=db user=inlet password=xxxxx dbname=inlet"},
		{"host=db password='s3 cret' dbname=inlet", "host=db password=xxxxx dbname=inlet"},
		{"host=db PASSWORD = s3cret", "host=db PASSWORD = xxxxx"},
		{"postgres://u:s3cret@db:notaport/x", "postgres://xxxxx@db:notaport/x"},
		{"https://hooks.example/alert?token=s3cret&x=1", "https://hooks.example/alert?token=xxxxx&x=1"},
		{"http://localhost:8080/webhooks/github", "http://localhost:8080/webhooks/github"},
		{"nats://u:s3cret@nats:4222", "nats://u:xxxxx@nats:4222"},
		{"nats://s3cret@nats:4222", "nats://xxxxx@nats:4222"},
		{"https://s3cret@hooks.example/x", "https://xxxxx@hooks.example/x"},
	} {
		got := redactURL(c.in)
		if got != c.want {
			t.Errorf("redactURL(%q) = %q, want %q", c.in, got, c.want)
		}
		if strings.Contains(got, "s3cret") || strings.Contains(got, "s3 cret") {
			t.Errorf("redactURL(%q) = %q keeps the secret", c.in, got)
		}
	}
}
