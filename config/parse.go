package config

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/redact"
)

// Reading each setting's value: the apply functions of the settings table.

// parseKeyWebhooks reads BULK_KEY_WEBHOOKS. An error names the entry by
// its position and hash, never its URL, which may hold a token.
func parseKeyWebhooks(v string) (map[string]string, error) {
	fields := strings.FieldsFunc(v, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' || r == '\n' })
	if len(fields) == 0 {
		return nil, nil
	}
	m := make(map[string]string, len(fields))
	for i, f := range fields {
		hash, raw, ok := strings.Cut(f, "=")
		if !ok {
			return nil, fmt.Errorf("entry %d: want HASH=URL", i+1)
		}
		if len(hash) != 32 || strings.Trim(hash, "0123456789abcdef") != "" {
			return nil, fmt.Errorf("entry %d: the key hash must be 32 lowercase hex digits, as the page shows it", i+1)
		}
		u, err := url.Parse(raw)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("entry %d (key %s): the webhook must be an absolute http:// or https:// URL", i+1, hash)
		}
		if _, dup := m[hash]; dup {
			return nil, fmt.Errorf("entry %d: key %s is given twice", i+1, hash)
		}
		m[hash] = raw
	}
	return m, nil
}

// parseRedisURL checks REDIS_URL without ever quoting it: it may hold a
// password.
func parseRedisURL(c *Config, v string) error {
	c.RedisURL = ""
	if v == "" {
		return nil
	}
	u, err := url.Parse(v)
	if err != nil {
		return errors.New("not a URL")
	}
	switch u.Scheme {
	case "redis", "rediss":
		if u.Host == "" {
			return errors.New("no host")
		}
	case "unix":
		if u.Path == "" {
			return errors.New("no socket path")
		}
	default:
		return errors.New("scheme must be redis, rediss or unix")
	}
	c.RedisURL = v
	return nil
}

// parseTrustedProxies reads a comma-separated list of addresses and
// prefixes; an address is a prefix of its full length.
func parseTrustedProxies(c *Config, v string) error {
	c.TrustedProxies = nil
	for _, f := range strings.Split(v, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		if a, err := netip.ParseAddr(f); err == nil {
			c.TrustedProxies = append(c.TrustedProxies, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
			continue
		}
		pf, err := netip.ParsePrefix(f)
		if err != nil {
			return fmt.Errorf("%q is neither an IP address nor a CIDR prefix", f)
		}
		c.TrustedProxies = append(c.TrustedProxies, pf.Masked())
	}
	return nil
}

// parseDays reads a Go duration, or whole days as "29d".
func parseDays(v string) (time.Duration, error) {
	if n, ok := strings.CutSuffix(v, "d"); ok {
		d, err := strconv.Atoi(n)
		if err != nil || d < 1 {
			return 0, errors.New("whole days must be a number >= 1")
		}
		return time.Duration(d) * 24 * time.Hour, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < time.Minute {
		return 0, errors.New("not a duration of at least 1m")
	}
	return d, nil
}

func parsePublicURL(c *Config, v string) error {
	if v == "" {
		c.PublicURL = nil
		return nil
	}
	u, err := parseHTTPURL(v)
	if err != nil {
		return err
	}
	if u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return errors.New("must not carry a user, query or fragment")
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	c.PublicURL = u
	return nil
}

// parseWeights reads tenant=weight pairs separated by commas.
func parseWeights(c *Config, v string) error {
	c.TenantWeights = nil
	if v == "" {
		return nil
	}
	c.TenantWeights = map[string]float64{}
	for _, pair := range strings.Split(v, ",") {
		name, w, ok := strings.Cut(pair, "=")
		name = strings.TrimSpace(name)
		if !ok || name == "" {
			return fmt.Errorf("%q is not tenant=weight", strings.TrimSpace(pair))
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(w), 64)
		if err != nil || !(f > 0) || f > 1e6 {
			return fmt.Errorf("the weight of %s is not a number in (0, 1e6]", name)
		}
		c.TenantWeights[name] = f
	}
	return nil
}

// wholeUnits parses a whole number, at least min, of unit into the duration
// that field picks out of the Config.
func wholeUnits(unit time.Duration, min int, field func(*Config) *time.Duration) func(*Config, string) error {
	return func(c *Config, v string) error {
		n, err := parseInt(v, min)
		*field(c) = time.Duration(n) * unit
		return err
	}
}

func parseBool(v string) (bool, error) {
	switch strings.ToLower(v) {
	case "1", "true", "yes", "on":
		return true, nil
	case "0", "false", "no", "off":
		return false, nil
	}
	return false, errors.New("not a boolean word")
}

func parseInt(v string, min int) (int, error) {
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, errors.New("not a whole number")
	}
	if n < min {
		return 0, fmt.Errorf("must be at least %d", min)
	}
	return n, nil
}

// parsePprofAddr accepts only a loopback address: the profiles show the
// program's insides, and a CPU profile costs CPU while it runs.
func parsePprofAddr(c *Config, v string) error {
	if v == "" {
		c.PprofListenAddr = ""
		return nil
	}
	host, _, err := net.SplitHostPort(v)
	if err != nil {
		return errors.New("want host:port")
	}
	if !isLoopbackHost(host) {
		return errors.New("want a loopback address (127.0.0.1, ::1 or localhost): profiles are not for the network")
	}
	c.PprofListenAddr = v
	return nil
}

func parseListen(c *Config, v string) error { return parseAddr(&c.ListenAddr, v) }

// nonEmpty is the apply of a setting that must name something.
func nonEmpty(field func(*Config) *string) func(*Config, string) error {
	return func(c *Config, v string) error {
		if v == "" {
			return errors.New("must not be empty")
		}
		*field(c) = v
		return nil
	}
}

func parseAddr(dst *string, v string) error {
	if v == "" || !strings.Contains(v, ":") {
		return errors.New("missing :port")
	}
	*dst = v
	return nil
}

// redactURL hides what may be secret in a URL (a password, the query's
// values, a fragment: package redact), so that an error about a setting
// never shows a secret; other text is shown as it is.
func redactURL(v string) string {
	if redact.Has(v) {
		return redact.RawURL(v)
	}
	if _, err := url.Parse(v); err != nil && strings.ContainsAny(v, "@?#") {
		return "(not shown: it may hold a password or token)"
	}
	return v
}

func parseUpstream(c *Config, v string) error {
	u, err := parseHTTPURL(v)
	if err != nil {
		return err
	}
	if u.User != nil {
		// The transport sends no Basic auth from a URL: a user or password
		// here would be dropped without a word.
		return errors.New("must not carry a user or password: sluice forwards each client's own credentials")
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return errors.New("must not carry a query or fragment")
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	c.UpstreamURL = u
	return nil
}

// parseHTTPURL reads an http or https URL with a host.
func parseHTTPURL(v string) (*url.URL, error) {
	u, err := url.Parse(v)
	if err != nil {
		return nil, errors.New("not a URL")
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, errors.New("scheme must be http or https")
	}
	if u.Host == "" {
		return nil, errors.New("no host")
	}
	return u, nil
}
