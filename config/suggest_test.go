package config

import (
	"reflect"
	"testing"
)

func TestEditDistance(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want int
	}{{"", "", 0}, {"abc", "abc", 0}, {"BATCH_MAX_CONCURENCY", "BATCH_MAX_CONCURRENCY", 1}, {"BACTH", "BATCH", 2}, {"kitten", "sitting", 3}, {"", "abc", 3}} {
		if got := editDistance(tc.a, tc.b); got != tc.want {
			t.Errorf("editDistance(%q, %q) = %d; want %d", tc.a, tc.b, got, tc.want)
		}
	}
}

func TestMisspeltEnvironmentVariablesAreFound(t *testing.T) {
	environ := []string{
		"BATCH_MAX_CONCURENCY=16",    // a letter dropped
		"BATCH_MAX_CONCURRENCY=8",    // right
		"UPSTREAM_ULR=http://x",      // letters swapped
		"batch_enabled=1",            // wrong case
		"STREAM_IDLE_TIMEOUT=60",     // the unit left off
		"UI_ENABLE=0",                // short, one edit
		"BATCH_SIZE=4",               // too far from BATCH_MAX_SIZE to be sure
		"LOG_FILE=/var/log/x",        // another program's
		"PATH=/usr/bin",              // no setting's prefix
		"HOME=/root",                 //
		"MAX_PENDING_CONN=sk-secret", // a value is never read
	}
	got := map[string]string{}
	for _, m := range Misspelt(environ) {
		got[m.Name] = m.Setting
	}
	want := map[string]string{
		"BATCH_MAX_CONCURENCY": "BATCH_MAX_CONCURRENCY",
		"UPSTREAM_ULR":         "UPSTREAM_URL",
		"batch_enabled":        "BATCH_ENABLED",
		"STREAM_IDLE_TIMEOUT":  "STREAM_IDLE_TIMEOUT_S",
		"UI_ENABLE":            "UI_ENABLED",
		"MAX_PENDING_CONN":     "MAX_PENDING_CONNS",
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Misspelt = %v; want %v", got, want)
	}
}
