package config

import (
	"strings"
	"testing"

	"github.com/sluicehq/sluice/gate"
)

// The OIDC settings and the file's [[oidc_groups]] load together.
func TestOIDCSettingsAndGroups(t *testing.T) {
	c, err := Load(withFile(t, `
OIDC_ISSUER = "https://idp.example.com/realms/eng"
OIDC_AUDIENCE = "sluice"

[[oidc_groups]]
group = "ml-platform"
models = ["claude-sonnet-*"]
backends = ["anthropic"]
class = "batch"
weight = 2
max_concurrent = 4
max_waiting = 20

[[oidc_groups]]
group = "*"
models = ["claude-haiku-*"]
`), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if c.OIDCIssuer != "https://idp.example.com/realms/eng" || c.OIDCAudience != "sluice" || c.OIDCTenantClaim != "email" || c.OIDCGroupsClaim != "groups" || !c.InboundAuth() {
		t.Errorf("settings %+v", c)
	}
	if len(c.OIDCGroups) != 2 {
		t.Fatalf("groups %+v", c.OIDCGroups)
	}
	g := c.OIDCGroups[0]
	if g.Name != "ml-platform" || strings.Join(g.Models, ",") != "claude-sonnet-*" || strings.Join(g.Backends, ",") != "anthropic" ||
		g.Class != gate.ClassBatch || g.Weight != 2 || g.MaxConcurrent != 4 || g.MaxWaiting != 20 {
		t.Errorf("ml-platform %+v", g)
	}
}

func TestOIDCRefused(t *testing.T) {
	const iss = "OIDC_ISSUER = \"https://idp.example.com\"\nOIDC_AUDIENCE = \"sluice\"\n"
	for name, c := range map[string]struct{ body, want string }{
		"plain http beyond loopback": {"OIDC_ISSUER = \"http://idp.example.com\"\nOIDC_AUDIENCE = \"a\"\n", "http:// only on a loopback host"},
		"not a URL":                  {"OIDC_ISSUER = \"idp\"\nOIDC_AUDIENCE = \"a\"\n", "not an absolute URL"},
		"no audience":                {"OIDC_ISSUER = \"https://idp.example.com\"\n", "OIDC_ISSUER needs OIDC_AUDIENCE"},
		"audience alone":             {"OIDC_AUDIENCE = \"a\"\n", "need OIDC_ISSUER"},
		"groups alone":               {"[[oidc_groups]]\ngroup = \"g\"\n", "need OIDC_ISSUER"},
		"empty claim":                {iss + "OIDC_TENANT_CLAIM = \"\"\n", "OIDC_TENANT_CLAIM"},
		"unknown key":                {iss + "[[oidc_groups]]\ngroup = \"g\"\nmodel = [\"x\"]\n", "unknown key oidc_groups.model"},
		"no group":                   {iss + "[[oidc_groups]]\nmodels = [\"x\"]\n", "oidc_groups[1] (the 1st one in the file, group \"\"): no group"},
		"twice":                      {iss + "[[oidc_groups]]\ngroup = \"g\"\n[[oidc_groups]]\ngroup = \"g\"\n", "oidc_groups[2] (the 2nd one in the file, group \"g\"): the group is mapped twice"},
		"class":                      {iss + "[[oidc_groups]]\ngroup = \"g\"\nclass = \"urgent\"\n", `class "urgent"`},
		"negative":                   {iss + "[[oidc_groups]]\ngroup = \"g\"\nmax_waiting = -1\n", "must not be negative"},
		"single value":               {iss + "oidc_groups = 3\n", "oidc_groups is an array of tables"},
	} {
		_, err := Load(withFile(t, c.body), env(nil))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want %q", name, err, c.want)
		}
	}
	// An http:// issuer on loopback is taken (a provider beside sluice, or a test's).
	if _, err := Load(withFile(t, "OIDC_ISSUER = \"http://127.0.0.1:5556\"\nOIDC_AUDIENCE = \"a\"\n"), env(nil)); err != nil {
		t.Errorf("loopback http issuer: %v", err)
	}
}

// With OIDC_ISSUER, an INBOUND_KEYS_FILE with no key is no mistake
// beyond loopback: the tokens let people in.
func TestOIDCAllowsNoSluiceKey(t *testing.T) {
	c := Config{ListenAddr: ":8080", OIDCIssuer: "https://idp.example.com"}
	if err := c.ValidateInboundKeys(0); err != nil {
		t.Error(err)
	}
	c.OIDCIssuer = ""
	if err := c.ValidateInboundKeys(0); err == nil {
		t.Error("no key, no issuer, all interfaces: no error")
	}
}
