// Package redact writes a URL for a log line or an error without the
// secrets it may carry: the password of its userinfo, the value of every
// query parameter (a ?token= or ?key= is as secret as a password) and its
// fragment. Every place sluice shows a URL it was given goes through it.
package redact

import (
	"net/url"
	"strings"
)

// Mask stands in for each hidden part.
const Mask = "xxxxx"

// URL is u with its password, query values and fragment hidden; the
// scheme, host, path and query parameter names stay, so the line still
// says which URL is meant.
func URL(u *url.URL) string {
	if u == nil {
		return ""
	}
	c := *u
	if c.RawQuery != "" {
		parts := strings.Split(c.RawQuery, "&")
		for i, p := range parts {
			if name, _, ok := strings.Cut(p, "="); ok {
				parts[i] = name + "=" + Mask
			} else if p != "" {
				parts[i] = Mask // a bare ?secret
			}
		}
		c.RawQuery = strings.Join(parts, "&")
	}
	if c.Fragment != "" || c.RawFragment != "" {
		c.Fragment, c.RawFragment = Mask, ""
	}
	return c.Redacted()
}

// RawURL is URL of raw parsed; text that does not parse as a URL is not
// shown at all, as it may hold a secret where the parser gave up.
func RawURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(not shown)"
	}
	return URL(u)
}

// Has reports whether raw parses as a URL with a part URL hides.
func Has(raw string) bool {
	u, err := url.Parse(raw)
	return err == nil && (u.User != nil || u.RawQuery != "" || u.Fragment != "" || u.ForceQuery)
}
