package oidcauth

import (
	"testing"

	"github.com/sluicehq/sluice/internal/oidctest"
)

// BenchmarkCheckFirst is a token's first check: its SHA-256, go-oidc's
// parse, RS256 signature check against the JWKS already fetched, claims
// and the groups' mapping, and its entry in the cache. Each iteration
// checks a token not seen before (the cache is emptied off the clock).
func BenchmarkCheckFirst(b *testing.B) {
	p := oidctest.Start(b)
	v := benchVerifier(b, p)
	tok := p.Token(b, alice).ID
	if _, err := v.Check(b.Context(), tok); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		v.cache = newCache(DefaultCacheSize)
		b.StartTimer()
		if _, err := v.Check(b.Context(), tok); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCheckCached is every later check of the same token: its
// SHA-256 and a map look-up under a lock.
func BenchmarkCheckCached(b *testing.B) {
	p := oidctest.Start(b)
	v := benchVerifier(b, p)
	tok := p.Token(b, alice).ID
	if _, err := v.Check(b.Context(), tok); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := v.Check(b.Context(), tok); err != nil {
			b.Fatal(err)
		}
	}
}

func benchVerifier(b *testing.B, p *oidctest.Provider) *Verifier {
	v, err := New(Options{Issuer: p.Issuer(), Audience: oidctest.ClientID, Groups: []Group{{Name: "eng", Models: []string{"claude-*"}}}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(v.o.Client.CloseIdleConnections)
	return v
}
