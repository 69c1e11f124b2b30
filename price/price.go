// Package price is the one table of what Claude models cost: sluice's spend
// counters, the simulator's cost counter and so the bench all price a
// usage here. It imports nothing of the project.
//
// The list prices are Anthropic's, in USD per million tokens, from
// https://platform.claude.com/docs/en/about-claude/pricing and the models'
// overview pages (https://platform.claude.com/docs/en/models/<model>/overview),
// as read on 2026-12-02; docs/spend.md gives the table. A negotiated rate
// replaces a model's row from the configuration file's [prices] section
// (see Overrides).
package price

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Rates are a model's prices in USD per million tokens, by kind of token.
type Rates struct {
	Input        float64 `toml:"input"`          // uncached input
	Output       float64 `toml:"output"`         // output, thinking included
	CacheWrite5m float64 `toml:"cache_write_5m"` // prompt-cache writes of the 5-minute TTL
	CacheWrite1h float64 `toml:"cache_write_1h"` // prompt-cache writes of the 1-hour TTL
	CacheRead    float64 `toml:"cache_read"`     // prompt-cache reads (hits and refreshes)
}

// Entry is one row of the table: a model id and its rates.
type Entry struct {
	// Model is the model's id as the API names it (claude-sonnet-4-5);
	// a dated id (claude-sonnet-4-5-20250929), a Vertex id (…@20250929)
	// or a Bedrock id (anthropic.claude-…-v1:0) of it matches it too.
	Model string
	Rates
	// LongAbove, if not 0, is the prompt length (input, cache writes and
	// cache reads together) past which Long prices every token of the
	// request, output included, rather than Rates: Haiku 5.5 is priced so.
	LongAbove int64
	Long      Rates
}

// BatchFactor is the part of the standard price that a Message Batches
// request pays, on every kind of token: half.
const BatchFactor = 0.5

// list is the table as shipped. Models sharing a row on the pricing page
// have a row each, so that a model is priced by its own id, never by a
// sibling's prefix. Where a source other than Anthropic's pages gave a
// price, the row says so.
var list = []Entry{
	// Fable 5.2: $8 / $40 with writes of $10 and $16 and reads of $0.20,
	// as the pricing page's row was quoted by the tools that track it
	// (rightsize v0.10.2's price check, 2026-11).
	{Model: "claude-fable-5-2", Rates: Rates{8, 40, 10, 16, 0.20}},
	// Mythos shares Fable's specifications and prices, release by release.
	{Model: "claude-mythos-5-2", Rates: Rates{8, 40, 10, 16, 0.20}},
	// Fable and Mythos 5.1 read the cache at a quarter of Fable 5's price.
	{Model: "claude-fable-5-1", Rates: Rates{10, 50, 12.50, 20, 0.25}},
	{Model: "claude-mythos-5-1", Rates: Rates{10, 50, 12.50, 20, 0.25}},
	{Model: "claude-fable-5", Rates: Rates{10, 50, 12.50, 20, 1}},
	{Model: "claude-mythos-5", Rates: Rates{10, 50, 12.50, 20, 1}},
	// Mythos Preview has no public list price; priced as Mythos 5, its
	// nearest documented sibling (as request.CacheMinimum treats it).
	{Model: "claude-mythos-preview", Rates: Rates{10, 50, 12.50, 20, 1}},
	{Model: "claude-opus-5-5", Rates: Rates{4, 20, 5, 8, 0.20}},
	{Model: "claude-opus-5", Rates: Rates{5, 25, 6.25, 10, 0.50}},
	{Model: "claude-opus-4-8", Rates: Rates{5, 25, 6.25, 10, 0.50}},
	{Model: "claude-opus-4-7", Rates: Rates{5, 25, 6.25, 10, 0.50}},
	{Model: "claude-opus-4-6", Rates: Rates{5, 25, 6.25, 10, 0.50}},
	{Model: "claude-opus-4-5", Rates: Rates{5, 25, 6.25, 10, 0.50}},
	{Model: "claude-opus-4-1", Rates: Rates{15, 75, 18.75, 30, 1.50}},
	{Model: "claude-opus-4-0", Rates: Rates{15, 75, 18.75, 30, 1.50}},
	{Model: "claude-opus-4", Rates: Rates{15, 75, 18.75, 30, 1.50}},
	{Model: "claude-3-opus", Rates: Rates{15, 75, 18.75, 30, 1.50}},
	// Sonnet 5.5's cache reads were cut from $0.20 to $0.10 on 2026-10-07.
	{Model: "claude-sonnet-5-5", Rates: Rates{2, 10, 2.50, 4, 0.10}},
	{Model: "claude-sonnet-5", Rates: Rates{2, 10, 2.50, 4, 0.20}},
	{Model: "claude-sonnet-4-6", Rates: Rates{3, 15, 3.75, 6, 0.30}},
	{Model: "claude-sonnet-4-5", Rates: Rates{3, 15, 3.75, 6, 0.30}},
	{Model: "claude-sonnet-4-0", Rates: Rates{3, 15, 3.75, 6, 0.30}},
	{Model: "claude-sonnet-4", Rates: Rates{3, 15, 3.75, 6, 0.30}},
	{Model: "claude-3-7-sonnet", Rates: Rates{3, 15, 3.75, 6, 0.30}},
	{Model: "claude-3-5-sonnet", Rates: Rates{3, 15, 3.75, 6, 0.30}},
	// Haiku 5.5 is priced by the prompt's length: past 100,000 tokens
	// every token of the request costs five times as much.
	{Model: "claude-haiku-5-5", Rates: Rates{0.10, 0.50, 0.125, 0.20, 0.01},
		LongAbove: 100_000, Long: Rates{0.50, 2.50, 0.625, 1, 0.05}},
	{Model: "claude-haiku-4-5", Rates: Rates{1, 5, 1.25, 2, 0.10}},
	{Model: "claude-3-5-haiku", Rates: Rates{0.80, 4, 1, 1.60, 0.08}},
	{Model: "claude-3-haiku", Rates: Rates{0.25, 1.25, 0.30, 0.50, 0.03}},
}

// families price a model the table does not name by the newest model of
// its family, the word its id carries: a new model of a family is most
// often priced as the family's latest was.
var families = []struct{ word, model string }{
	{"fable", "claude-fable-5-2"},
	{"mythos", "claude-mythos-5-2"},
	{"opus", "claude-opus-5-5"},
	{"sonnet", "claude-sonnet-5-5"},
	{"haiku", "claude-haiku-5-5"},
}

// Basis says how a model's price was found.
type Basis uint8

const (
	// Unknown: no row and no family; the tokens are counted, the cost
	// is not.
	Unknown Basis = iota
	// Listed: the model's own row (the list's, or an override's).
	Listed
	// Family: no row of its own; priced as the newest of its family.
	Family
)

func (b Basis) String() string {
	switch b {
	case Listed:
		return "listed"
	case Family:
		return "family"
	}
	return "unknown"
}

// Table is a price table: the list, with any overrides. A nil *Table is
// the list as shipped.
type Table struct {
	entries []Entry // every row, longest Model first, so that the most specific wins
}

var defaultTable = build(nil)

// Default is the list as shipped.
func Default() *Table { return defaultTable }

func build(overrides []Entry) *Table {
	byModel := map[string]Entry{}
	var order []string
	for _, e := range append(append([]Entry(nil), list...), overrides...) {
		if _, ok := byModel[e.Model]; !ok {
			order = append(order, e.Model)
		}
		byModel[e.Model] = e
	}
	t := &Table{}
	for _, m := range order {
		t.entries = append(t.entries, byModel[m])
	}
	// Longest first: claude-opus-4-1 before claude-opus-4.
	slices.SortStableFunc(t.entries, func(a, b Entry) int { return len(b.Model) - len(a.Model) })
	return t
}

func (t *Table) table() *Table {
	if t == nil {
		return defaultTable
	}
	return t
}

// Entries is the table's rows, longest model id first.
func (t *Table) Entries() []Entry { return append([]Entry(nil), t.table().entries...) }

// Lookup is model's row and how it was found; Unknown with a zero Entry
// when neither the table nor a family knows it.
func (t *Table) Lookup(model string) (Entry, Basis) {
	t = t.table()
	id := model
	// A Bedrock id (us.anthropic.claude-…) or any other wrapping: the
	// API's id starts at claude-.
	if i := strings.Index(id, "claude-"); i > 0 {
		id = id[i:]
	}
	for _, e := range t.entries {
		if rest, ok := strings.CutPrefix(id, e.Model); ok && versionSuffix(rest) {
			return e, Listed
		}
	}
	for _, f := range families {
		if strings.Contains(id, f.word) {
			for _, e := range t.entries {
				if e.Model == f.model {
					return e, Family
				}
			}
		}
	}
	return Entry{}, Unknown
}

// versionSuffix reports whether rest, what follows a row's model id in a
// model's id, names a snapshot of that same model rather than another
// model: nothing, a date (-20250929), a Vertex @date, a Bedrock -v1:0, or
// a bracketed variant ([1m]). -1 after claude-opus-4 is Opus 4.1, not a
// snapshot of Opus 4.
func versionSuffix(rest string) bool {
	switch {
	case rest == "":
		return true
	case rest[0] == '@', rest[0] == '[', rest[0] == ':':
		return true
	case strings.HasPrefix(rest, "-v"):
		return true
	case len(rest) >= 9 && rest[0] == '-':
		for _, c := range rest[1:9] {
			if c < '0' || c > '9' {
				return false
			}
		}
		return len(rest) == 9 || !('0' <= rest[9] && rest[9] <= '9')
	}
	return false
}

// Usage is what one answer's usage reports, by kind of token.
type Usage struct {
	Input, Output, CacheWrite5m, CacheWrite1h, CacheRead int64
}

// UsageOf is a usage as the API reports it: cacheWrite the cache writes
// in all, write1h the part of them of the 1-hour TTL (usage.cache_creation);
// the rest are of the 5-minute TTL, the API's default. Each count is held
// to what one answer can hold (Count).
func UsageOf(input, output, cacheWrite, write1h, cacheRead int64) Usage {
	cacheWrite = Count(cacheWrite)
	write1h = min(Count(write1h), cacheWrite)
	return Usage{Input: Count(input), Output: Count(output), CacheWrite5m: cacheWrite - write1h, CacheWrite1h: write1h, CacheRead: Count(cacheRead)}
}

// MaxTokens is the most tokens of one kind one answer is counted for:
// 2^40, a million times any context window, and few enough that the
// ledger's int64 sums cannot wrap.
const MaxTokens = 1 << 40

// Count is n, one answer's count of a kind of token as its usage reports
// it, held to [0, MaxTokens]: the API reports no negative count and none
// that large, but a broken upstream might, and a negative count would run
// the spend counters backwards, a huge one wrap their sums.
func Count(n int64) int64 { return min(max(n, 0), MaxTokens) }

// Kind is a kind of token, as the spend metrics label them.
type Kind uint8

// The kinds, in the order of Cost.USD.
const (
	Input Kind = iota
	Output
	CacheWrite5m
	CacheWrite1h
	CacheRead
	Kinds // how many there are
)

var kindNames = [Kinds]string{"input", "output", "cache_write_5m", "cache_write_1h", "cache_read"}

func (k Kind) String() string { return kindNames[k] }

// Tokens is u's count of kind k.
func (u Usage) Tokens(k Kind) int64 {
	return [Kinds]int64{u.Input, u.Output, u.CacheWrite5m, u.CacheWrite1h, u.CacheRead}[k]
}

// Prompt is u's whole prompt: input, cache writes and cache reads.
func (u Usage) Prompt() int64 { return u.Input + u.CacheWrite5m + u.CacheWrite1h + u.CacheRead }

// USD is an amount by kind of token.
type USD [Kinds]float64

// Total is the amount of every kind together.
func (a USD) Total() float64 {
	var s float64
	for _, v := range a {
		s += v
	}
	return s
}

// Cost is what one usage cost.
type Cost struct {
	USD   USD // by kind; all 0 when Basis is Unknown
	Basis Basis
}

// Total is the cost in all.
func (c Cost) Total() float64 { return c.USD.Total() }

// Cost prices u, an answer of model; batch says it was a Message Batches
// request (BatchFactor of the price).
func (t *Table) Cost(model string, u Usage, batch bool) Cost {
	e, basis := t.Lookup(model)
	if basis == Unknown {
		return Cost{}
	}
	r := e.Rates
	if e.LongAbove > 0 && u.Prompt() > e.LongAbove {
		r = e.Long
	}
	f := 1e-6
	if batch {
		f *= BatchFactor
	}
	return Cost{Basis: basis, USD: USD{
		float64(u.Input) * r.Input * f,
		float64(u.Output) * r.Output * f,
		float64(u.CacheWrite5m) * r.CacheWrite5m * f,
		float64(u.CacheWrite1h) * r.CacheWrite1h * f,
		float64(u.CacheRead) * r.CacheRead * f,
	}}
}

// maxRate bounds a rate, in USD per million tokens: a hundred times the
// dearest list price is no negotiated rate but a typo, and with a count
// held to 2^40 tokens (Count) it keeps every cost finite.
const maxRate = 1e6

// valid reports whether every rate of r is a number in [0, maxRate].
func (r Rates) valid() bool {
	for _, v := range []float64{r.Input, r.Output, r.CacheWrite5m, r.CacheWrite1h, r.CacheRead} {
		if !(v >= 0 && v <= maxRate) { // NaN fails both
			return false
		}
	}
	return true
}

// New is the list with overrides: each replaces its model's row, or adds
// one for a model the list does not name (a snapshot priced apart, a
// model newer than the list). An override has no long-prompt prices: it
// prices every request of its model at its rates.
func New(overrides map[string]Rates) (*Table, error) {
	if len(overrides) == 0 {
		return defaultTable, nil
	}
	models := slices.Sorted(maps.Keys(overrides))
	es := make([]Entry, 0, len(models))
	for _, m := range models {
		r := overrides[m]
		if m == "" || strings.TrimSpace(m) != m {
			return nil, fmt.Errorf("prices: model %q: want a model id such as claude-sonnet-4-5", m)
		}
		if !r.valid() {
			return nil, fmt.Errorf("prices: model %q: every rate must be a number from 0 to %g (USD per million tokens)", m, float64(maxRate))
		}
		es = append(es, Entry{Model: m, Rates: r})
	}
	return build(es), nil
}
