package config

import (
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"

	"github.com/BurntSushi/toml"
)

// backendsKey is the config file's array of upstream backends, one table
// each (see docs/routing.md):
//
//	[[backends]]
//	name = "primary"
//	url = "https://api.anthropic.com"   # optional: UPSTREAM_URL
//	keys = ["env:ANTHROPIC_KEY_A", "file:/run/secrets/key_b"]
//	max_concurrency = 16                # each key's cap; optional
//	weight = 1                          # optional
//	bulk = true                         # optional: bulk requests go here
//
// A key is named, never written: env:NAME reads the environment variable
// NAME, file:PATH the file at PATH, when sluice starts. Like [prices],
// it is no setting: only the file can spell it.
const backendsKey = "backends"

// backendKeys are the keys one backend's table takes.
var backendKeys = []string{"name", "kind", "url", "keys", "max_concurrency", "weight", "bulk", "region", "project", "resource", "endpoint", "models", "profile", "credentials_file",
	"requests_per_minute", "input_tokens_per_minute", "output_tokens_per_minute"}

// Backend is one upstream backend the config file declares.
type Backend struct {
	Name string
	// Kind is what it speaks: "anthropic" (the Messages API itself, the
	// default), "bedrock", "vertex" or "foundry"; KindOf describes it.
	Kind string
	// URL is its base URL; nil means UPSTREAM_URL's.
	URL *url.URL
	// Keys name its upstream keys: env:NAME or file:PATH, read when
	// sluice starts. Never the keys themselves. A foundry backend's are
	// its resource's API keys; without any it uses Microsoft Entra ID.
	Keys []string
	// MaxConcurrency caps each of its keys' calls in flight; 0 means
	// BATCH_MAX_CONCURRENCY.
	MaxConcurrency int
	// Weight is its keys' share when routing picks the least loaded; 0
	// means 1.
	Weight float64
	// Bulk says the bulk endpoint's batches go to its first key.
	Bulk bool
	// A cloud's place (see docs/clouds.md): its region, its project
	// (Vertex), its resource (Foundry), an endpoint that replaces the
	// region's or resource's, and the model ids (Foundry: deployment
	// names) it answers to by the first-party id a client sends.
	Region, Project, Resource, Endpoint string
	Models                              map[string]string
	// Profile is the AWS shared-config profile a Bedrock backend's
	// credentials come from; CredentialsFile the Google credentials file
	// a Vertex backend's do. Empty: each cloud's default chain.
	Profile, CredentialsFile string
	// Limits are each key's rate limits per minute, when its answers do
	// not say them (a cloud's carry no anthropic-ratelimit-* headers):
	// requests, input tokens, output tokens; 0, not known.
	RequestsPerMinute, InputTokensPerMinute, OutputTokensPerMinute int
}

// MaxBackendKeys bounds the keys of all backends together: a router
// keeps which keys hold a prompt prefix in one 64-bit set.
const MaxBackendKeys = 64

type fileBackend struct {
	Name           string            `toml:"name"`
	Kind           string            `toml:"kind"`
	URL            string            `toml:"url"`
	Keys           []string          `toml:"keys"`
	MaxConcurrency int               `toml:"max_concurrency"`
	Weight         float64           `toml:"weight"`
	Bulk           bool              `toml:"bulk"`
	Region         string            `toml:"region"`
	Project        string            `toml:"project"`
	Resource       string            `toml:"resource"`
	Endpoint       string            `toml:"endpoint"`
	Models         map[string]string `toml:"models"`
	Profile        string            `toml:"profile"`
	Credentials    string            `toml:"credentials_file"`
	RPM            int               `toml:"requests_per_minute"`
	ITPM           int               `toml:"input_tokens_per_minute"`
	OTPM           int               `toml:"output_tokens_per_minute"`
}

var errBackendsNotArray = errors.New("backends must be an array of tables ([[backends]]), one per backend")

// decodeBackends reads the [[backends]] of the config file name, whose
// text is data, strictly: each mistake names the backend by its place in
// the file (backends[1]) and what is wrong.
func decodeBackends(name string, data []byte) ([]Backend, error) {
	var f struct {
		Backends []fileBackend `toml:"backends"`
	}
	md, err := toml.Decode(string(data), &f)
	if err != nil {
		return nil, fmt.Errorf("config file %s: [[%s]]: %v", name, backendsKey, err)
	}
	var bad []string
	for _, k := range md.Undecoded() {
		if len(k) > 0 && k[0] == backendsKey && !(len(k) > 2 && k[len(k)-2] == "models") {
			bad = append(bad, fmt.Sprintf("unknown key %s (a backend takes %s)", k, strings.Join(backendKeys, ", ")))
		}
	}
	seen := map[string]bool{}
	bulk := 0
	keys := 0
	out := make([]Backend, 0, len(f.Backends))
	for i, fb := range f.Backends {
		at := fmt.Sprintf("backends[%d]", i)
		if fb.Name != "" {
			at += " (" + fb.Name + ")"
		}
		b, errs := fb.backend()
		for _, e := range errs {
			bad = append(bad, at+": "+e)
		}
		if seen[b.Name] {
			bad = append(bad, at+": the name is taken by an earlier backend")
		}
		seen[b.Name] = true
		if b.Bulk {
			bulk++
		}
		keys += max(len(b.Keys), 1)
		out = append(out, b)
	}
	if bulk > 1 {
		bad = append(bad, "more than one backend says bulk = true; the bulk endpoint goes to one")
	}
	if keys > MaxBackendKeys {
		bad = append(bad, fmt.Sprintf("%d keys in all; at most %d", keys, MaxBackendKeys))
	}
	if len(bad) > 0 {
		return nil, fmt.Errorf("config file %s: %s", name, strings.Join(bad, "; "))
	}
	return out, nil
}

// backend checks one table and makes it a Backend; the errors say what
// is wrong, each on its own.
func (fb fileBackend) backend() (Backend, []string) {
	var errs []string
	b := Backend{Name: fb.Name, Kind: fb.Kind, Keys: fb.Keys, MaxConcurrency: fb.MaxConcurrency, Weight: fb.Weight, Bulk: fb.Bulk,
		Region: fb.Region, Project: fb.Project, Resource: fb.Resource, Endpoint: fb.Endpoint, Models: fb.Models, Profile: fb.Profile, CredentialsFile: fb.Credentials,
		RequestsPerMinute: fb.RPM, InputTokensPerMinute: fb.ITPM, OutputTokensPerMinute: fb.OTPM}
	if b.Kind == "" {
		b.Kind = kinds[0].Name
	}
	switch {
	case b.Name == "":
		errs = append(errs, "name is missing")
	case strings.ContainsFunc(b.Name, func(r rune) bool {
		return !(r == '-' || r == '_' || r == '.' || '0' <= r && r <= '9' || 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z')
	}) || len(b.Name) > 64:
		errs = append(errs, "name may hold only letters, digits, '-', '_' and '.', at most 64 of them (it labels metrics)")
	}
	if k, ok := KindOf(b.Kind); ok {
		errs = append(errs, k.check(fb)...)
	} else {
		errs = append(errs, unknownKind(fb.Kind)...)
	}
	for _, k := range b.Keys {
		ref, name, ok := strings.Cut(k, ":")
		if !ok || (ref != "env" && ref != "file") || name == "" {
			errs = append(errs, fmt.Sprintf(`a key must be named as "env:NAME" or "file:PATH" (%s), never written in the file`, describeRef(k)))
		}
	}
	if fb.URL != "" {
		u, err := url.Parse(fb.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil || u.RawQuery != "" {
			errs = append(errs, "url must be http:// or https://, with a host and no user or query")
		} else {
			b.URL = u
		}
	}
	if fb.Endpoint != "" {
		if u, err := url.Parse(fb.Endpoint); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
			errs = append(errs, "endpoint must be http:// or https://, with a host and no user")
		}
	}
	if fb.MaxConcurrency < 0 || fb.MaxConcurrency > 100000 {
		errs = append(errs, "max_concurrency must be from 1 to 100000 (or left out)")
	}
	if fb.RPM < 0 || fb.ITPM < 0 || fb.OTPM < 0 {
		errs = append(errs, "requests_per_minute, input_tokens_per_minute and output_tokens_per_minute must be 0 or more")
	}
	if fb.Weight < 0 || fb.Weight > 1000 || fb.Weight != fb.Weight {
		errs = append(errs, "weight must be from 0 to 1000 (or left out)")
	}
	slices.Sort(errs)
	return b, errs
}

// describeRef says what a bad key entry looks like without repeating it:
// it may be a key pasted in by mistake.
func describeRef(k string) string {
	if len(k) > 20 {
		return fmt.Sprintf("this one is %d characters that are not a reference", len(k))
	}
	if ref, _, ok := strings.Cut(k, ":"); ok && len(ref) <= 8 {
		return fmt.Sprintf("this one starts %q", ref+":")
	}
	return "this one is not a reference"
}

// BulkUpstream is where the bulk endpoint's batches go: the URL of the
// backend the config file names for bulk (else of its first anthropic
// backend), else UPSTREAM_URL.
func (c Config) BulkUpstream() *url.URL {
	var first *Backend
	for i, b := range c.Backends {
		if !b.FirstParty() {
			continue
		}
		if first == nil {
			first = &c.Backends[i]
		}
		if b.Bulk {
			first = &c.Backends[i]
			break
		}
	}
	if first == nil || first.URL == nil {
		return c.UpstreamURL
	}
	return first.URL
}

// RoutePolicy is ROUTE_POLICY: how a request's backend key is chosen when
// the config file declares backends.
type RoutePolicy uint8

const (
	// RouteAffinity: where its prompt prefix is cached, else its
	// session's key, else the key with room soonest (the default).
	RouteAffinity RoutePolicy = iota
	// RouteRoundRobin: each key in turn, whatever it holds (for
	// comparison).
	RouteRoundRobin
)

var routePolicies = choice[RoutePolicy]{"affinity", "round-robin"}

func (v RoutePolicy) String() string { return routePolicies.name(v) }
