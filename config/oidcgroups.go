package config

import (
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"

	"github.com/BurntSushi/toml"

	"github.com/sluicehq/sluice/oidcauth"
	"github.com/sluicehq/sluice/request"
)

// oidcGroupsKey is the config file's array of identity-provider groups,
// each mapped to what a sluice key carries (docs/deploy.md):
//
//	[[oidc_groups]]
//	group = "ml-platform"        # as the token's groups claim spells it; "*": every token
//	models = ["claude-sonnet-*"] # optional; absent: all
//	backends = ["anthropic"]     # optional; absent: all
//	class = "interactive"        # or "batch"
//	weight = 2                   # optional; share in the fair order
//	max_concurrent = 4           # optional; per person
//	max_waiting = 20             # optional; per person
//
// Like [[budgets]], it is no setting: only the file can spell it.
const oidcGroupsKey = "oidc_groups"

var oidcGroupKeys = []string{"group", "models", "backends", "class", "weight", "max_concurrent", "max_waiting"}

type fileOIDCGroup struct {
	Group         string   `toml:"group"`
	Models        []string `toml:"models"`
	Backends      []string `toml:"backends"`
	Class         string   `toml:"class"`
	Weight        float64  `toml:"weight"`
	MaxConcurrent int      `toml:"max_concurrent"`
	MaxWaiting    int      `toml:"max_waiting"`
}

var errOIDCGroupsNotArray = errors.New(`oidc_groups is an array of tables, one per group: [[oidc_groups]] with group and what its members may do`)

// decodeOIDCGroups reads the [[oidc_groups]] of the config file name
// strictly: an unknown key, a group named twice, a bad class or a
// negative limit stops sluice, naming the table.
func decodeOIDCGroups(name string, data []byte) ([]oidcauth.Group, error) {
	var f struct {
		Groups []fileOIDCGroup `toml:"oidc_groups"`
	}
	md, err := toml.Decode(string(data), &f)
	if err != nil {
		return nil, fmt.Errorf("config file %s: [[%s]]: %v", name, oidcGroupsKey, err)
	}
	var bad []string
	for _, k := range md.Undecoded() {
		if len(k) > 0 && k[0] == oidcGroupsKey {
			bad = append(bad, fmt.Sprintf("unknown key %s (a group takes %s)", k, strings.Join(oidcGroupKeys, ", ")))
		}
	}
	if len(bad) > 0 {
		slices.Sort(bad)
		return nil, fmt.Errorf("config file %s: %s", name, strings.Join(bad, "; "))
	}
	groups := make([]oidcauth.Group, 0, len(f.Groups))
	seen := map[string]bool{}
	for i, g := range f.Groups {
		class, err := request.ParseClass(g.Class)
		switch {
		case g.Group == "":
			err = errors.New("no group: name the group as the tokens' groups claim spells it")
		case seen[g.Group]:
			err = errors.New("the group is mapped twice")
		case err != nil:
			err = fmt.Errorf("class %q: %w", g.Class, err)
		case g.Weight < 0 || g.MaxConcurrent < 0 || g.MaxWaiting < 0:
			err = errors.New("weight, max_concurrent and max_waiting must not be negative")
		}
		if err != nil {
			return nil, fmt.Errorf("config file %s: oidc_groups[%d] (the %s one in the file, group %q): %w", name, i+1, ordinal(i+1), g.Group, err)
		}
		seen[g.Group] = true
		groups = append(groups, oidcauth.Group{Name: g.Group, Models: g.Models, Backends: g.Backends, Class: class,
			Weight: g.Weight, MaxConcurrent: g.MaxConcurrent, MaxWaiting: g.MaxWaiting})
	}
	return groups, nil
}

// parseOIDCIssuer takes an https:// issuer URL, or an http:// one on a
// loopback host: the provider's keys must not cross a network in the
// clear, where whoever is on the path could sign tokens sluice takes.
func parseOIDCIssuer(c *Config, v string) error {
	c.OIDCIssuer = v
	if v == "" {
		return nil
	}
	u, err := url.Parse(v)
	switch {
	case err != nil || u.Host == "":
		return errors.New("not an absolute URL")
	case u.Scheme == "http" && !isLoopbackHost(u.Hostname()):
		return errors.New("http:// only on a loopback host: the provider's keys would cross the network in the clear; use https://")
	case u.Scheme != "https" && u.Scheme != "http":
		return errors.New("not an https:// URL")
	case u.RawQuery != "" || u.Fragment != "" || u.User != nil:
		return errors.New("an issuer URL has no query, fragment or user")
	}
	return nil
}

// validateOIDC checks the OIDC settings that go together.
func (c Config) validateOIDC() error {
	switch {
	case c.OIDCIssuer == "" && (c.OIDCAudience != "" || len(c.OIDCGroups) > 0):
		return errors.New("OIDC_AUDIENCE and [[oidc_groups]] need OIDC_ISSUER, the identity provider whose tokens sluice takes")
	case c.OIDCIssuer != "" && c.OIDCAudience == "":
		return errors.New("OIDC_ISSUER needs OIDC_AUDIENCE: the client ID the identity provider puts in the tokens' aud for sluice")
	}
	return nil
}

// InboundAuth reports whether sluice holds the upstream key and takes
// credentials of its own from clients: sluice keys (INBOUND_KEYS_FILE,
// or the keys store, INBOUND_KEYS_STORE),
// identity-provider tokens (OIDC_ISSUER), or both.
func (c Config) InboundAuth() bool {
	return c.InboundKeysFile != "" || c.InboundKeysStore || c.OIDCIssuer != ""
}
