package redact

import (
	"net/url"
	"strings"
	"testing"
)

func TestURLHidesEverySecret(t *testing.T) {
	for raw, want := range map[string]string{
		"https://api.example/v1":                           "https://api.example/v1",
		"https://user:s3cr3t@api.example/v1":               "https://user:xxxxx@api.example/v1",
		"https://api.example/v1?token=s3cr3t":              "https://api.example/v1?token=xxxxx",
		"https://api.example/?a=1&key=s3cr3t":              "https://api.example/?a=xxxxx&key=xxxxx",
		"https://api.example/?s3cr3t":                      "https://api.example/?xxxxx",
		"https://api.example/#s3cr3t":                      "https://api.example/#xxxxx",
		"redis://:s3cr3t@127.0.0.1:6379/2?password=s3cr3t": "redis://:xxxxx@127.0.0.1:6379/2?password=xxxxx",
	} {
		if got := RawURL(raw); got != want || strings.Contains(got, "s3cr3t") {
			t.Errorf("RawURL(%q) = %q; want %q", raw, got, want)
		}
	}
	if got := RawURL("https://u:s3cr3t%zz@host"); strings.Contains(got, "s3cr3t") {
		t.Errorf("an unparsable URL is shown: %q", got)
	}
	u, _ := url.Parse("https://api.example/?token=s3cr3t")
	URL(u)
	if u.RawQuery != "token=s3cr3t" {
		t.Errorf("URL changed its argument: %v", u)
	}
}
