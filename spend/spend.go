// Package spend counts what each tenant, inbound key and model spent, from
// the usage of their answers priced by package price. Ledger.Add is the
// one place a usage becomes USD: the metrics, the access line and the page
// read what it counted, and budgets can sit on its totals.
package spend

import (
	"cmp"
	"math"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/sluicehq/sluice/price"
)

// Key is who spent, and on what.
type Key struct {
	Tenant string
	// Inbound is the client's key by its short hash: the sluice key's
	// under inbound keys, else the API key the client sent. Never a key.
	Inbound string
	Model   string
}

// Other is the key every label of a row takes once the ledger holds its
// most rows: the totals stay whole, the labels stay bounded.
var Other = Key{Tenant: "other", Inbound: "other", Model: "other"}

// Ledger counts spend by Key, in at most max rows (and Other's). Add
// takes a read lock and a few atomic adds once a row exists, so it does
// not allocate on the request path.
type Ledger struct {
	prices *price.Table
	max    int

	mu   sync.RWMutex
	rows map[Key]*row

	// sinks hear every answer's spend as Add counts it: the budgets and
	// the durable store. Set by Tell before the ledger counts.
	sinks []Sink
}

// Entry is one answer's spend as Add counted it.
type Entry struct {
	Key
	USD    float64
	Tokens int64
	// Estimated says the usage was estimated (a cut stream).
	Estimated bool
}

// Sink hears each answer's spend. Spent is called on the request path,
// concurrently: it must be quick and must not block (no I/O).
type Sink interface {
	Spent(Entry)
}

// Tell makes s hear every spend Add counts from now on. Call it before the
// ledger counts: it is not safe beside Add. A nil ledger or sink is a no-op.
func (l *Ledger) Tell(s Sink) {
	if l != nil && s != nil {
		l.sinks = append(l.sinks, s)
	}
}

type row struct {
	usd    [price.Kinds]atomicFloat
	tokens [price.Kinds]atomic.Int64
	// estimated is the part of usd counted from estimated usage (a
	// stream cut before its final usage); unpriced the tokens of models
	// with no price, counted in tokens but not in usd.
	estimated atomicFloat
	unpriced  atomic.Int64
}

// New returns a ledger pricing with prices (nil: the list) in at most rows
// rows and Other's (at least 1).
func New(prices *price.Table, rows int) *Ledger {
	return &Ledger{prices: prices, max: max(rows, 1), rows: map[Key]*row{}}
}

// Prices is the table the ledger prices with.
func (l *Ledger) Prices() *price.Table { return l.prices }

// Add counts one answer's usage u under k (whose Model is the answer's
// model) and returns its cost. batch prices it at the Message Batches
// price; estimated says u is an estimate (a stream cut before the
// upstream reported its final usage). A nil ledger only prices.
func (l *Ledger) Add(k Key, u price.Usage, batch, estimated bool) price.Cost {
	if l == nil {
		return price.Default().Cost(k.Model, u, batch)
	}
	c := l.prices.Cost(k.Model, u, batch)
	r := l.row(k)
	var total float64
	var tokens int64
	for kind := range price.Kinds {
		n := u.Tokens(kind)
		if n == 0 {
			continue
		}
		tokens += n
		r.tokens[kind].Add(n)
		if c.USD[kind] != 0 {
			r.usd[kind].add(c.USD[kind])
			total += c.USD[kind]
		}
		if c.Basis == price.Unknown {
			r.unpriced.Add(n)
		}
	}
	if estimated && total != 0 {
		r.estimated.add(total)
	}
	if len(l.sinks) > 0 && tokens > 0 {
		// k itself, even when its row is Other's: a budget binds its own
		// tenant or key however many others the metrics have room for.
		e := Entry{Key: k, USD: total, Tokens: tokens, Estimated: estimated}
		for _, s := range l.sinks {
			s.Spent(e)
		}
	}
	return c
}

func (l *Ledger) row(k Key) *row {
	l.mu.RLock()
	r := l.rows[k]
	l.mu.RUnlock()
	if r != nil {
		return r
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if r = l.rows[k]; r != nil {
		return r
	}
	if len(l.rows) >= l.max {
		k = Other
		if r = l.rows[k]; r != nil {
			return r
		}
	}
	r = &row{}
	l.rows[k] = r
	return r
}

// Row is one row's counts since sluice started.
type Row struct {
	Key
	USD            price.USD
	Tokens         [price.Kinds]int64
	EstimatedUSD   float64
	UnpricedTokens int64
}

// TotalUSD is the row's spend in all.
func (r Row) TotalUSD() float64 { return r.USD.Total() }

// Rows is every row's counts, in no order.
func (l *Ledger) Rows() []Row {
	if l == nil {
		return nil
	}
	l.mu.RLock()
	defer l.mu.RUnlock()
	out := make([]Row, 0, len(l.rows))
	for k, r := range l.rows {
		o := Row{Key: k, EstimatedUSD: r.estimated.load(), UnpricedTokens: r.unpriced.Load()}
		for kind := range price.Kinds {
			o.USD[kind], o.Tokens[kind] = r.usd[kind].load(), r.tokens[kind].Load()
		}
		out = append(out, o)
	}
	return out
}

// TenantModel is one tenant's spend on one model, its keys together: a
// row of the page's spend table.
type TenantModel struct {
	Tenant         string  `json:"tenant"`
	Model          string  `json:"model"`
	USD            float64 `json:"usd"`
	Tokens         int64   `json:"tokens"`
	EstimatedUSD   float64 `json:"estimated_usd,omitempty"`
	UnpricedTokens int64   `json:"unpriced_tokens,omitempty"`
}

// ByTenantModel is the n tenant-and-model pairs that spent the most, the
// most first (then the most tokens).
func (l *Ledger) ByTenantModel(n int) []TenantModel {
	type tm struct{ tenant, model string }
	sums := map[tm]*TenantModel{}
	for _, r := range l.Rows() {
		k := tm{r.Tenant, r.Model}
		s := sums[k]
		if s == nil {
			s = &TenantModel{Tenant: r.Tenant, Model: r.Model}
			sums[k] = s
		}
		s.USD += r.TotalUSD()
		for _, t := range r.Tokens {
			s.Tokens += t
		}
		s.EstimatedUSD += r.EstimatedUSD
		s.UnpricedTokens += r.UnpricedTokens
	}
	out := make([]TenantModel, 0, len(sums))
	for _, s := range sums {
		out = append(out, *s)
	}
	slices.SortFunc(out, func(a, b TenantModel) int {
		return cmp.Or(cmp.Compare(b.USD, a.USD), cmp.Compare(b.Tokens, a.Tokens),
			cmp.Compare(a.Tenant, b.Tenant), cmp.Compare(a.Model, b.Model))
	})
	return out[:min(len(out), n)]
}

// atomicFloat is a float64 added to atomically.
type atomicFloat struct{ bits atomic.Uint64 }

func (f *atomicFloat) add(v float64) {
	for {
		old := f.bits.Load()
		if f.bits.CompareAndSwap(old, math.Float64bits(math.Float64frombits(old)+v)) {
			return
		}
	}
}

func (f *atomicFloat) load() float64 { return math.Float64frombits(f.bits.Load()) }
