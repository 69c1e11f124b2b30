package proxy

import (
	"strings"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/price"
	"github.com/sluicehq/sluice/request"
	"github.com/sluicehq/sluice/spend"
)

// NewSpend is the ledger sluice counts spend in under cfg: priced by the
// list and the config file's [prices], in at most spendRowsPerTenant rows
// per tenant tracked (TENANT_MAX), so that the spend series are bounded
// as the tenant series are. Give the same one to the bulk service
// (bulk.Config.Spend) and to New (Options.Spend).
func NewSpend(cfg config.Config) *spend.Ledger {
	return spend.New(cfg.Prices, max(cfg.TenantMax, 1)*spendRowsPerTenant)
}

// spendRowsPerTenant is the (key, model) pairs counted apart per tenant
// on average: a tenant's few keys and models.
const spendRowsPerTenant = 4

// Spend is the ledger the proxy counts spend in.
func (p *Proxy) Spend() *spend.Ledger { return p.spend }

// SpendByTenantModel is the n tenant-and-model pairs that spent the most
// since sluice started: the page's spend table.
func (p *Proxy) SpendByTenantModel(n int) []spend.TenantModel { return p.spend.ByTenantModel(n) }

// charge counts the spend of ex's answer of model, whose usage is u: at
// the price of its tokens, and, for a stream cut before the upstream's
// final usage, with its output estimated (see streamUsage.estimate). It
// sets the access line's cost.
func (ex *exchange) charge(model string, u usage) {
	estimated := ex.rec.cut
	if estimated {
		out := ex.rec.cutOutput
		if m := int64(ex.desc.Cost.MaxTokens); m > 0 {
			out = min(out, m) // the upstream stops at max_tokens; the estimate's bytes a token may not
		}
		u.Output = max(u.Output, out)
	}
	c := ex.p.spend.Add(spend.Key{Tenant: ex.rec.tenant, Inbound: inboundLabel(ex), Model: model}, u.priced(), false, estimated)
	ex.rec.costUSD, ex.rec.cost = c.Total(), costNote(c.Basis, estimated)
}

// priced is u by the kinds the price table prices: the writes not said to
// be of the 1-hour TTL are of the 5-minute one, the API's default.
func (u usage) priced() price.Usage {
	return price.UsageOf(u.Input, u.Output, u.CacheWrite, u.CacheWrite1h, u.CacheRead)
}

// costNote is the access line's cost field: how cost_usd was found.
func costNote(b price.Basis, estimated bool) string {
	if estimated {
		return "estimated"
	}
	return b.String()
}

// inboundLabel is the client's key by its short hash, as the spend series
// label it: the sluice key's under inbound keys (the first 16 hex digits
// of the SHA-256 the keys file lists), else the API key the client sent
// (the descriptor's, request.Tenant's hash). Never the key.
func inboundLabel(ex *exchange) string {
	if c, ok := request.CallerOf(ex.r.Context()); ok {
		if sum, ok := strings.CutPrefix(c, "sluice-key:"); ok && len(sum) >= 16 {
			return sum[:16]
		}
	}
	return ex.desc.Key
}

// deltaEnvelope is the bytes of a content_block_delta event that are not
// its text: what estimate takes off each one.
var deltaEnvelope = int64(len("event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"\"}}\n\n"))

// bytesPerToken is the text bytes per output token estimate assumes: about
// four characters of English a token.
const bytesPerToken = 4

// estimate is the output tokens of a stream cut before its final
// message_delta, from the deltas relayed: their text's bytes over
// bytesPerToken; cut says the final usage never came, and the estimate
// is wanted.
func (s *streamUsage) estimate() (output int64, cut bool) {
	return max(s.deltaBytes-s.deltas*deltaEnvelope, 0) / bytesPerToken, !s.final
}
