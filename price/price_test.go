package price_test

import (
	"math"
	"testing"

	"github.com/sluicehq/sluice/price"
	"github.com/sluicehq/sluice/request"
)

// Every model the prompt-cache table knows has a price, of its own or by
// its family: what sluice caches by, it can price.
func TestEveryCacheModelHasAPrice(t *testing.T) {
	for _, m := range request.CacheModels() {
		if _, basis := price.Default().Lookup(m); basis == price.Unknown {
			t.Errorf("%s: CacheMinimum knows it, the price table does not", m)
		}
	}
}

// The pricing page's models are priced by their own rows, in every
// spelling of their ids; an id that names another model (Opus 4.1 after
// Opus 4's row) is not taken for a snapshot.
func TestListedModels(t *testing.T) {
	for _, c := range []struct {
		model        string
		input, read  float64
		output, w1h  float64
		wantRowModel string
	}{
		{"claude-sonnet-4-5", 3, 0.30, 15, 6, "claude-sonnet-4-5"},
		{"claude-sonnet-4-5-20250929", 3, 0.30, 15, 6, "claude-sonnet-4-5"},
		{"claude-sonnet-4-5@20250929", 3, 0.30, 15, 6, "claude-sonnet-4-5"},
		{"us.anthropic.claude-sonnet-4-5-20250929-v1:0", 3, 0.30, 15, 6, "claude-sonnet-4-5"},
		{"claude-sonnet-4-5[1m]", 3, 0.30, 15, 6, "claude-sonnet-4-5"},
		{"claude-opus-4-20250514", 15, 1.50, 75, 30, "claude-opus-4"},
		{"claude-opus-4-1-20250805", 15, 1.50, 75, 30, "claude-opus-4-1"},
		{"claude-opus-4-5-20251101", 5, 0.50, 25, 10, "claude-opus-4-5"},
		{"claude-opus-5-5", 4, 0.20, 20, 8, "claude-opus-5-5"},
		{"claude-opus-5", 5, 0.50, 25, 10, "claude-opus-5"},
		{"claude-sonnet-5-5", 2, 0.10, 10, 4, "claude-sonnet-5-5"},
		{"claude-fable-5-1", 10, 0.25, 50, 20, "claude-fable-5-1"},
		{"claude-haiku-4-5-20251001", 1, 0.10, 5, 2, "claude-haiku-4-5"},
		{"claude-3-5-haiku-20241022", 0.80, 0.08, 4, 1.60, "claude-3-5-haiku"},
		{"claude-3-haiku-20240307", 0.25, 0.03, 1.25, 0.50, "claude-3-haiku"},
	} {
		e, basis := price.Default().Lookup(c.model)
		if basis != price.Listed || e.Model != c.wantRowModel || e.Input != c.input || e.CacheRead != c.read || e.Output != c.output || e.CacheWrite1h != c.w1h {
			t.Errorf("%s: %s row %+v; want listed under %s at %v/%v/%v/%v", c.model, basis, e, c.wantRowModel, c.input, c.read, c.output, c.w1h)
		}
	}
}

// A model the table does not name is priced as the newest of its family;
// one of no family is not priced at all, and costs nothing it could be
// mistaken for.
func TestFamilyAndUnknown(t *testing.T) {
	for model, want := range map[string]string{"claude-opus-6": "claude-opus-5-5", "claude-sonnet-4-7": "claude-sonnet-5-5",
		"claude-haiku-6-20270101": "claude-haiku-5-5", "anthropic.claude-fable-7": "claude-fable-5-2"} {
		e, basis := price.Default().Lookup(model)
		if basis != price.Family || e.Model != want {
			t.Errorf("%s: %s %s; want by family as %s", model, basis, e.Model, want)
		}
	}
	for _, model := range []string{"", "gpt-4o", "claude-instant-1"} {
		c := price.Default().Cost(model, price.Usage{Input: 1000, Output: 1000}, false)
		if c.Basis != price.Unknown || c.Total() != 0 {
			t.Errorf("%q: %+v; want unknown, no cost", model, c)
		}
	}
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-12*math.Max(1, math.Abs(b)) }

// A usage's cost: each kind at its own rate (the two cache writes apart),
// a batch at half of every kind, Haiku 5.5's long prompts at its long
// rates on every token.
func TestCost(t *testing.T) {
	u := price.Usage{Input: 1000, Output: 2000, CacheWrite5m: 3000, CacheWrite1h: 4000, CacheRead: 5000}
	c := price.Default().Cost("claude-sonnet-4-5", u, false)
	want := [price.Kinds]float64{1000 * 3e-6, 2000 * 15e-6, 3000 * 3.75e-6, 4000 * 6e-6, 5000 * 0.30e-6}
	for k := range price.Kinds {
		if !near(c.USD[k], want[k]) {
			t.Errorf("%s: %v, want %v", k, c.USD[k], want[k])
		}
	}
	if !near(c.Total(), 0.003+0.030+0.01125+0.024+0.0015) {
		t.Errorf("total %v", c.Total())
	}
	b := price.Default().Cost("claude-sonnet-4-5", u, true)
	for k := range price.Kinds {
		if !near(b.USD[k], want[k]/2) {
			t.Errorf("batch %s: %v, want %v", k, b.USD[k], want[k]/2)
		}
	}
	short := price.Default().Cost("claude-haiku-5-5", price.Usage{Input: 100_000, Output: 1000}, false)
	long := price.Default().Cost("claude-haiku-5-5", price.Usage{Input: 90_000, CacheRead: 10_001, Output: 1000}, false)
	if !near(short.Total(), 100_000*0.10e-6+1000*0.50e-6) || !near(long.Total(), 90_000*0.50e-6+10_001*0.05e-6+1000*2.50e-6) {
		t.Errorf("Haiku 5.5: %v at 100,000 prompt tokens, %v past them", short.Total(), long.Total())
	}
}

// UsageOf splits the API's cache writes by TTL: what is not said to be of
// the hour is of five minutes; a split past the total is held to it.
func TestUsageOf(t *testing.T) {
	if u := price.UsageOf(1, 2, 10, 4, 3); u != (price.Usage{Input: 1, Output: 2, CacheWrite5m: 6, CacheWrite1h: 4, CacheRead: 3}) {
		t.Errorf("%+v", u)
	}
	if u := price.UsageOf(0, 0, 10, 0, 0); u.CacheWrite5m != 10 || u.CacheWrite1h != 0 {
		t.Errorf("no split: %+v", u)
	}
	if u := price.UsageOf(0, 0, 10, 99, 0); u.CacheWrite5m != 0 || u.CacheWrite1h != 10 {
		t.Errorf("split past the total: %+v", u)
	}
	// A broken upstream's negative counts are none, and a negative total
	// does not turn the split negative.
	if u := price.UsageOf(-1, -2, -10, -4, -3); u != (price.Usage{}) {
		t.Errorf("negative counts: %+v", u)
	}
	if u := price.UsageOf(0, 5, -5000, 9, 0); u != (price.Usage{Output: 5}) {
		t.Errorf("negative total, positive split: %+v", u)
	}
	// Past what any answer holds: held to MaxTokens, so that sums of
	// them do not wrap.
	if u := price.UsageOf(math.MaxInt64, 0, math.MaxInt64, math.MaxInt64, 0); u != (price.Usage{Input: price.MaxTokens, CacheWrite1h: price.MaxTokens}) {
		t.Errorf("huge counts: %+v", u)
	}
}

// An override replaces its model's row (its snapshots follow it), adds a
// model the list lacks, and leaves the rest of the list alone; a bad rate
// is refused; a nil table is the list.
func TestOverrides(t *testing.T) {
	r := price.Rates{Input: 2.4, Output: 12, CacheWrite5m: 3, CacheWrite1h: 4.8, CacheRead: 0.24}
	tab, err := price.New(map[string]price.Rates{"claude-sonnet-4-5": r, "my-fine-tune": {Input: 1, Output: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if e, b := tab.Lookup("claude-sonnet-4-5-20250929"); b != price.Listed || e.Rates != r {
		t.Errorf("overridden: %s %+v", b, e)
	}
	if e, b := tab.Lookup("my-fine-tune"); b != price.Listed || e.Input != 1 {
		t.Errorf("added: %s %+v", b, e)
	}
	if e, _ := tab.Lookup("claude-sonnet-4-6"); e.Input != 3 {
		t.Errorf("a model not overridden: %+v", e)
	}
	if e, _ := price.Default().Lookup("claude-sonnet-4-5"); e.Input != 3 {
		t.Errorf("the list itself changed: %+v", e)
	}
	var none *price.Table
	if e, b := none.Lookup("claude-opus-4-5"); b != price.Listed || e.Input != 5 {
		t.Errorf("nil table: %s %+v", b, e)
	}
	for name, bad := range map[string]map[string]price.Rates{
		"negative": {"claude-sonnet-4-5": {Input: -1}},
		"NaN":      {"claude-sonnet-4-5": {Output: math.NaN()}},
		"absurd":   {"claude-sonnet-4-5": {Output: 1e300}}, // a cost of 2^40 tokens at it is +Inf
		"infinite": {"claude-sonnet-4-5": {CacheRead: math.Inf(1)}},
		"no id":    {"": r},
		"spaces":   {" claude-sonnet-4-5": r},
	} {
		if _, err := price.New(bad); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
