package main

import (
	"testing"
	"time"
)

// inlet events show: how long after the provider's time an event arrived.
func TestDeliveryLag(t *testing.T) {
	for d, want := range map[time.Duration]string{
		780 * time.Millisecond:              "received 780ms later",
		0:                                   "received 0s later",
		1500 * time.Millisecond:             "received 2s later",
		3*time.Hour + 2*time.Second:         "received 3h0m2s later",
		-400 * time.Millisecond:             "received 400ms before it: the provider's clock runs ahead",
		-(2*time.Second + time.Millisecond): "received 2s before it: the provider's clock runs ahead",
	} {
		if got := deliveryLag(d); got != want {
			t.Errorf("deliveryLag(%s) = %q, want %q", d, got, want)
		}
	}
}
