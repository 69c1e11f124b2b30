package spend

import "time"

// What the admin API asks of the spend books (package spendstore keeps
// them): a Filter, answered with Lines.

// Filter selects the books' lines: by tenant, key and model ("" any),
// from From to before To (zero: unbounded; whole UTC days), grouped by
// Period.
type Filter struct {
	Tenant, Key, Model string
	Period             string // day, week (ISO, from Monday), month or all; UTC
	From, To           time.Time
}

// Line is one period's spend of a tenant, key and model.
type Line struct {
	Period       string    `json:"period"` // 2026-12-02, 2026-W49, 2026-12 or all
	Start        time.Time `json:"period_start"`
	Tenant       string    `json:"tenant"`
	Key          string    `json:"key"`
	Model        string    `json:"model"`
	USD          float64   `json:"usd"`
	EstimatedUSD float64   `json:"estimated_usd"`
	Tokens       int64     `json:"tokens"`
	Answers      int64     `json:"answers"`
}

// Periods are the groupings the books' Query takes.
var Periods = []string{"day", "week", "month", "all"}
