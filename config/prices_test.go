package config

import (
	"strings"
	"testing"

	"github.com/sluicehq/sluice/price"
)

// A config file's [prices] section replaces a model's list price (a
// negotiated rate) beside the settings; without one the list stands.
func TestPricesSection(t *testing.T) {
	c, err := Load(withFile(t, `
BATCH_MAX_SIZE = 2

[prices."claude-sonnet-4-5"]
input = 2.4
output = 12
cache_write_5m = 3
cache_write_1h = 4.8
cache_read = 0.24
`), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	want := price.Rates{Input: 2.4, Output: 12, CacheWrite5m: 3, CacheWrite1h: 4.8, CacheRead: 0.24}
	if e, b := c.Prices.Lookup("claude-sonnet-4-5-20250929"); c.MaxSize != 2 || b != price.Listed || e.Rates != want {
		t.Fatalf("size %d, sonnet 4.5 %s %+v; want 2 and the override %+v", c.MaxSize, b, e.Rates, want)
	}
	if got := c.Prices.Cost("claude-sonnet-4-5", price.Usage{Output: 1_000_000}, false).Total(); got != 12 {
		t.Errorf("a million output tokens cost %v, want 12", got)
	}
	if e, _ := c.Prices.Lookup("claude-opus-4-5"); e.Input != 5 {
		t.Errorf("a model not overridden: %+v", e)
	}
	plain, err := Load(withFile(t, "BATCH_MAX_SIZE = 2\n"), env(nil))
	if err != nil || plain.Prices != nil {
		t.Errorf("no [prices]: %v, %v; want the list (nil)", plain.Prices, err)
	}
}

// A [prices] section is decoded strictly: an unknown key, a missing rate,
// a negative or non-numeric one, or prices as a single value is refused at
// start, naming what is wrong.
func TestPricesSectionRefused(t *testing.T) {
	const all = "input = 1\noutput = 2\ncache_write_5m = 1.25\ncache_write_1h = 2\ncache_read = 0.1\n"
	for name, c := range map[string]struct{ body, want string }{
		"unknown key":   {`[prices."m"]` + "\n" + all + "inptu = 3\n", `unknown key prices.m.inptu`},
		"missing rate":  {`[prices."m"]` + "\ninput = 1\noutput = 2\ncache_write_5m = 1\ncache_write_1h = 2\n", `prices."m" has no cache_read (give all five`},
		"negative":      {`[prices."m"]` + "\n" + strings.Replace(all, "output = 2", "output = -2", 1), `every rate must be a number from 0 to 1e+06`},
		"text":          {`[prices."m"]` + "\n" + strings.Replace(all, "input = 1", `input = "1"`, 1), `[prices]`},
		"single value":  {"prices = 3\n", `prices is a section of tables`},
		"a model value": {"[prices]\nm = 3\n", `[prices]`},
	} {
		_, err := Load(withFile(t, c.body), env(nil))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v; want an error with %q", name, err, c.want)
		}
	}
}
