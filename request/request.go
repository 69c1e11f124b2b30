// Package request describes one Messages request as sluice's policies see
// it: who sends it, which cacheable prompt prefixes it carries, what it is
// likely to cost and how long its client will wait. It is built once, in
// one pass over the body, and read by every policy on the request path
// (admission, wave release, the gate's order); none of them parses the
// body again.
package request

import (
	"time"

	"github.com/sluicehq/sluice/gate"
)

// Descriptor is what the policies know of one Messages request.
type Descriptor struct {
	// Tenant identifies who sends the request: a short hash of the
	// credential it carries (never the credential), or "" when it carries
	// none.
	Tenant string
	// Key is a short hash of the upstream credential the request will be
	// forwarded with (the one it brings, or, with inbound keys, the one
	// sluice holds): whose rate-limit buckets it spends. Never the
	// credential; "" when there is none.
	Key string
	// Upstream is the short name of the upstream key a router chose for
	// the request (its backend's key; see package route), whose
	// rate-limit buckets it then spends instead of Key's; "" without
	// routing.
	Upstream string
	// Session names the conversation the request belongs to, for a
	// router to keep on one key: the X-Claude-Code-Session-Id header,
	// else metadata.user_id, else the tenant; cut to MaxUserID bytes.
	Session string
	// Inbound is what sluice knows of the holder of the inbound sluice key
	// the request presented; nil when inbound keys are off.
	Inbound *Inbound
	// UserID is the body's metadata.user_id, cut to MaxUserID bytes: a
	// tenant under TENANT_FROM=metadata.
	UserID string
	// Class is the request's priority class, as its tenant policy
	// decided (see dispatch.Tenants).
	Class gate.Class
	// Model is the body's model, cut to 128 bytes.
	Model string
	// Stream is the body's stream flag.
	Stream bool
	// Prefixes are the request's cacheable prompt prefixes, one per
	// cache_control breakpoint, in the API's prefix order (tools, system,
	// messages), the shortest first; at most MaxPrefixes, the first ones
	// (more is the upstream's to refuse). Top-level automatic caching
	// counts as a breakpoint on the last block, unless that block has its
	// own. Nil when the request asks for no caching.
	Prefixes []Prefix
	// Reads are the prefixes a cache read of the request may end at, the
	// shortest first: each breakpoint's and those of the block
	// boundaries in its lookback window (LookbackPositions, the
	// breakpoint's own counted), as the API looks back for a live entry.
	// The breakpoints' are in Prefixes too and have their TTL; the others
	// have a TTL of 0: they are read, never written. Nil without Prefixes.
	Reads []Prefix
	// Cost is the estimated cost of the request.
	Cost Cost
	// Patience is how long the client waits for an attempt, from the
	// official SDKs' x-stainless-timeout header; zero when unknown.
	Patience time.Duration
}

// PaceKey is the upstream key whose rate limits the request spends: the
// routed one, else Key.
func (d *Descriptor) PaceKey() string {
	if d.Upstream != "" {
		return d.Upstream
	}
	return d.Key
}

// Inbound describes the holder of one inbound sluice key: who it is in
// the fair order and the per-tenant limits, and what it may call. Zero
// values mean the defaults.
type Inbound struct {
	Name          string     // the key's name in the keys file
	Tenant        string     // the tenant it belongs to; "" means Name
	Weight        float64    // its share in the fair order; 0 means 1
	Class         gate.Class // its priority class; the zero value is interactive
	MaxConcurrent int        // upstream calls at once for its tenant; 0: no limit
	MaxWaiting    int        // requests waiting for its tenant; 0: no limit
	Models        []string   // models it may call; nil means all
	Backends      []string   // backends its requests may go to, by name; nil means all
	Groups        []string   // the identity provider's groups of the caller; nil for a sluice key
	// Hash is the first 16 hex digits of the key's SHA-256: the key as
	// the spend metrics and budgets name it. Never the key.
	Hash string
}

// Prefix is one cacheable prefix of a prompt: everything up to and
// including a cache_control breakpoint.
type Prefix struct {
	// Key is a hash of the model and of every byte of the prompt up to and
	// including the breakpoint (without the cache_control markers
	// themselves), so two requests share a Key exactly when the API would
	// let one read the other's cache entry. Bytes are hashed as the body
	// spells them: a body that spells the same prompt differently (other
	// whitespace within a block's members, other escapes, members in
	// another order) gets other keys; one client spells alike. The key
	// is the same in every process (the first 8 bytes of a SHA-256), so
	// replicas can share it.
	Key uint64
	// Tokens is the estimated number of input tokens in the prefix.
	Tokens int
	// TTL is the cache lifetime the breakpoint asks for: 5 minutes or 1
	// hour.
	TTL time.Duration
}

// Cost is what a request is estimated to spend of the upstream's limits.
type Cost struct {
	InputTokens int // estimated input tokens of the whole prompt
	MaxTokens   int // the body's max_tokens (0 when absent or invalid)
}

// CharsPerToken is the estimate's tokenizer: about four characters per
// token, the usual rule of thumb for English text.
const CharsPerToken = 4

// EstimateTokens is the estimated number of tokens in n bytes of prompt
// text: n/CharsPerToken rounded up, and at least 1 (an empty block still
// costs the model something). The simulator counts with it too, so that
// sluice's estimate and the simulator's usage agree.
func EstimateTokens(n int) int {
	return max((n+CharsPerToken-1)/CharsPerToken, 1)
}
