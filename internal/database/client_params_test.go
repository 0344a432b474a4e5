package database

import (
	"maps"
	"testing"
)

func TestDropClientParamsKeepsTheServersSettings(t *testing.T) {
	params := map[string]string{
		"pool_max_conns": "4", "pool_min_conns": "1", "pool_health_check_period": "1m",
		"statement_cache_capacity": "0", "description_cache_capacity": "0", "default_query_exec_mode": "exec",
		"application_name": "inlet", "search_path": "x", "options": "-c lock_timeout=1s",
	}
	DropClientParams(params)
	want := map[string]string{"application_name": "inlet", "search_path": "x", "options": "-c lock_timeout=1s"}
	if !maps.Equal(params, want) {
		t.Fatalf("after DropClientParams: %v, want %v", params, want)
	}
}
