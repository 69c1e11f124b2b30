package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/price"
	"github.com/sluicehq/sluice/spend"
)

var (
	spendLabels   = []string{"tenant", "key", "model", "kind"}
	spendUSDDesc  = prometheus.NewDesc("sluice_spend_usd_total", "USD spent, priced from each answer's usage by the price table (docs/spend.md), by tenant, inbound key (a short hash of it), model and kind (input, output, cache_write_5m, cache_write_1h, cache_read); a model with no price counts in tokens only. Rows are bounded: past the bound every label is other.", spendLabels, nil)
	spendTokDesc  = prometheus.NewDesc("sluice_spend_tokens_total", "Tokens of answers' usage, by tenant, inbound key (a short hash of it), model and kind, as sluice_spend_usd_total counts them.", spendLabels, nil)
	spendEstDesc  = prometheus.NewDesc("sluice_spend_estimated_usd_total", "The part of sluice_spend_usd_total counted from estimated usage: streams cut before the upstream reported their final usage, their output estimated from the bytes relayed.", spendLabels[:3], nil)
	spendUnprDesc = prometheus.NewDesc("sluice_spend_unpriced_tokens_total", "Tokens of answers of a model the price table does not know (no row, no family): counted in sluice_spend_tokens_total, not in sluice_spend_usd_total.", spendLabels[:3], nil)
)

// spendCollector reports the spend ledger's rows on each scrape; the
// ledger bounds them, so the labels are bounded too.
type spendCollector func() []spend.Row

func (spendCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{spendUSDDesc, spendTokDesc, spendEstDesc, spendUnprDesc} {
		ch <- d
	}
}

func (f spendCollector) Collect(ch chan<- prometheus.Metric) {
	for _, r := range f() {
		for kind := range price.Kinds {
			if r.Tokens[kind] == 0 {
				continue
			}
			ch <- prometheus.MustNewConstMetric(spendTokDesc, prometheus.CounterValue, float64(r.Tokens[kind]), r.Tenant, r.Inbound, r.Model, kind.String())
			if r.UnpricedTokens == 0 {
				ch <- prometheus.MustNewConstMetric(spendUSDDesc, prometheus.CounterValue, r.USD[kind], r.Tenant, r.Inbound, r.Model, kind.String())
			}
		}
		if r.EstimatedUSD != 0 {
			ch <- prometheus.MustNewConstMetric(spendEstDesc, prometheus.CounterValue, r.EstimatedUSD, r.Tenant, r.Inbound, r.Model)
		}
		if r.UnpricedTokens != 0 {
			ch <- prometheus.MustNewConstMetric(spendUnprDesc, prometheus.CounterValue, float64(r.UnpricedTokens), r.Tenant, r.Inbound, r.Model)
		}
	}
}
