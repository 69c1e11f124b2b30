package config

import (
	"strings"
	"testing"
)

func loadFile(t *testing.T, text string) (Config, error) {
	t.Helper()
	return Load(withFile(t, text), func(string) (string, bool) { return "", false })
}

func TestBackendsFromTheFile(t *testing.T) {
	c, err := loadFile(t, `
ROUTE_POLICY = "round-robin"
[[backends]]
name = "primary"
keys = ["env:KEY_A", "file:/run/secrets/b"]
max_concurrency = 8
weight = 2
[[backends]]
name = "second"
url = "https://second.example:8443/prefix"
keys = ["env:KEY_C"]
bulk = true
`)
	if err != nil {
		t.Fatal(err)
	}
	if c.RoutePolicy != RouteRoundRobin || len(c.Backends) != 2 {
		t.Fatalf("policy %v, %d backends", c.RoutePolicy, len(c.Backends))
	}
	p, s := c.Backends[0], c.Backends[1]
	if p.Name != "primary" || p.Kind != "anthropic" || p.URL != nil || len(p.Keys) != 2 || p.MaxConcurrency != 8 || p.Weight != 2 {
		t.Errorf("primary: %+v", p)
	}
	if s.URL == nil || s.URL.String() != "https://second.example:8443/prefix" || !s.Bulk {
		t.Errorf("second: %+v", s)
	}
	if u := c.BulkUpstream(); u != s.URL {
		t.Errorf("BulkUpstream %v; want the bulk backend's", u)
	}
}

// TestBackendsRefused: each mistake is named with its backend's place and
// what to do; a key written in the file is refused without being echoed.
func TestBackendsRefused(t *testing.T) {
	for _, tc := range []struct{ name, text, want string }{
		{"no name", "[[backends]]\nkeys=[\"env:A\"]", "backends[0]: name is missing"},
		{"no keys", "[[backends]]\nname=\"a\"", "keys is missing"},
		{"a key in the clear", "[[backends]]\nname=\"a\"\nkeys=[\"sk-ant-api03-SECRETSECRETSECRET\"]", "never written in the file"},
		{"unknown key", "[[backends]]\nname=\"a\"\nkeys=[\"env:A\"]\nmax_concurency=3", "unknown key backends.max_concurency"},
		{"bad url", "[[backends]]\nname=\"a\"\nkeys=[\"env:A\"]\nurl=\"ftp://x\"", "url must be"},
		{"twice", "[[backends]]\nname=\"a\"\nkeys=[\"env:A\"]\n[[backends]]\nname=\"a\"\nkeys=[\"env:B\"]", "backends[1] (a): the name is taken"},
		{"two bulks", "[[backends]]\nname=\"a\"\nkeys=[\"env:A\"]\nbulk=true\n[[backends]]\nname=\"b\"\nkeys=[\"env:B\"]\nbulk=true", "more than one backend says bulk"},
		{"bad kind", "[[backends]]\nname=\"a\"\nkind=\"azure\"\nkeys=[\"env:A\"]", `unknown kind "azure"`},
		{"cloud with keys", "[[backends]]\nname=\"a\"\nkind=\"bedrock\"\nregion=\"us-east-1\"\nkeys=[\"env:A\"]", "keys are for kind anthropic"},
		{"bulk on a cloud", "[[backends]]\nname=\"a\"\nkind=\"bedrock\"\nregion=\"us-east-1\"\nbulk=true", "bulk is for kind anthropic"},
		{"vertex without project", "[[backends]]\nname=\"a\"\nkind=\"vertex\"\nregion=\"global\"", "project is missing"},
		{"foundry without resource", "[[backends]]\nname=\"a\"\nkind=\"foundry\"", "resource is missing"},
		{"foundry resource as a URL", "[[backends]]\nname=\"a\"\nkind=\"foundry\"\nresource=\"x.services.ai.azure.com\"", "resource must be the resource's name alone"},
		{"foundry with a region", "[[backends]]\nname=\"a\"\nkind=\"foundry\"\nresource=\"r\"\nregion=\"eastus2\"", "region, project, profile and credentials_file are for kind bedrock or vertex"},
		{"resource on bedrock", "[[backends]]\nname=\"a\"\nkind=\"bedrock\"\nregion=\"us-east-1\"\nresource=\"r\"", "resource is for kind foundry"},
		{"negative cap", "[[backends]]\nname=\"a\"\nkeys=[\"env:A\"]\nmax_concurrency=-1", "max_concurrency must be"},
		{"not an array", "backends = 3", "backends must be an array of tables"},
		{"bad name", "[[backends]]\nname=\"a b\"\nkeys=[\"env:A\"]", "name may hold only"},
		{"bad policy", "ROUTE_POLICY = \"random\"", "ROUTE_POLICY"},
	} {
		_, err := loadFile(t, tc.text)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v; want it to say %q", tc.name, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "SECRET") {
			t.Errorf("%s: the error echoes the key: %v", tc.name, err)
		}
	}
}

// TestFoundryBackend: a foundry backend takes its resource, its models
// (deployment names) and, optionally, keys (the resource's API keys).
func TestFoundryBackend(t *testing.T) {
	c, err := loadFile(t, `
[[backends]]
name = "azure"
kind = "foundry"
resource = "my-resource"
keys = ["env:FOUNDRY_KEY"]
models = { "claude-sonnet-4-5" = "sonnet-prod" }
[[backends]]
name = "azure-entra"
kind = "foundry"
endpoint = "http://127.0.0.1:9090/anthropic"
`)
	if err != nil {
		t.Fatal(err)
	}
	a, e := c.Backends[0], c.Backends[1]
	if a.Kind != "foundry" || a.Resource != "my-resource" || len(a.Keys) != 1 || a.Models["claude-sonnet-4-5"] != "sonnet-prod" {
		t.Errorf("azure: %+v", a)
	}
	if e.Endpoint != "http://127.0.0.1:9090/anthropic" || len(e.Keys) != 0 {
		t.Errorf("azure-entra: %+v", e)
	}
}
