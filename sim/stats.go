package sim

import (
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/sluicehq/sluice/price"
	"github.com/sluicehq/sluice/request"
)

// Stats is a snapshot of what the simulator has served since it started or
// was last reset.
type Stats struct {
	// Requests counts API requests answered (not /sim/ ones).
	Requests int64 `json:"requests"`
	// Inflight and PeakInflight count /v1/messages requests in generation.
	Inflight     int64            `json:"inflight"`
	PeakInflight int64            `json:"peak_inflight"`
	ByStatus     map[string]int64 `json:"by_status"`
	Tokens       TokenStats       `json:"tokens"`
	// CostUSD is what the served tokens would cost at list prices, batch
	// items at half price.
	CostUSD float64 `json:"cost_usd"`
	// InputCostUSD is the part of CostUSD spent on input: uncached input,
	// cache writes and cache reads.
	InputCostUSD float64 `json:"input_cost_usd"`
	// Credentials counts the API requests by the credential each carried,
	// named by its header ("x-api-key" or "bearer"), a space, and the
	// credential's short hash (request.Tenant's), never the credential:
	// so a test can tell which key reached the upstream. A SigV4-signed
	// Bedrock request counts as "sigv4" and the hash of its access key
	// id (its signature changes with every request).
	Credentials map[string]int64 `json:"credentials"`
	// Backends counts the API requests by the API they spoke: "anthropic"
	// (/v1/…), "bedrock" (/model/…) or "vertex" (/v1/projects/…), each
	// with its statuses as the client saw them (a Bedrock throttle is a
	// 429, its overload a 503).
	Backends map[string]BackendStats `json:"backends"`
}

// BackendStats counts one API's requests.
type BackendStats struct {
	Requests int64            `json:"requests"`
	ByStatus map[string]int64 `json:"by_status"`
}

// TokenStats counts the tokens of completed replies and batch items.
type TokenStats struct {
	Input         int64 `json:"input"`
	Output        int64 `json:"output"`
	CacheCreation int64 `json:"cache_creation"`
	CacheRead     int64 `json:"cache_read"`
}

type statsRecorder struct {
	mu       sync.Mutex
	requests int64
	byStatus map[int]int64
	creds    map[string]int64
	backends map[string]map[int]int64
	tokens   TokenStats
	cost     float64
	inCost   float64
}

func (r *statsRecorder) finish(backend string, status int) {
	if status == 0 {
		status = http.StatusOK // a handler that wrote nothing answered 200
	}
	r.mu.Lock()
	r.requests++
	r.byStatus[status]++
	if r.backends == nil {
		r.backends = map[string]map[int]int64{}
	}
	if r.backends[backend] == nil {
		r.backends[backend] = map[int]int64{}
	}
	r.backends[backend][status]++
	r.mu.Unlock()
}

// credential counts the credentials h carries, by header and hash.
func (r *statsRecorder) credential(h http.Header) {
	var seen []string
	if k := h.Get("X-Api-Key"); k != "" {
		seen = append(seen, "x-api-key "+request.Tenant(http.Header{"X-Api-Key": {k}}))
	}
	if a := h.Get("Authorization"); a != "" {
		if akid, ok := sigV4KeyID(a); ok {
			seen = append(seen, "sigv4 "+request.Tenant(http.Header{"X-Api-Key": {akid}}))
		} else {
			seen = append(seen, "bearer "+request.Tenant(http.Header{"Authorization": {a}}))
		}
	}
	r.mu.Lock()
	if r.creds == nil {
		r.creds = map[string]int64{}
	}
	for _, s := range seen {
		r.creds[s]++
	}
	r.mu.Unlock()
}

// sigV4KeyID is the access key id of a SigV4 Authorization header.
func sigV4KeyID(auth string) (string, bool) {
	rest, ok := strings.CutPrefix(auth, "AWS4-HMAC-SHA256 Credential=")
	if !ok {
		return "", false
	}
	akid, _, ok := strings.Cut(rest, "/")
	return akid, ok
}

func (r *statsRecorder) record(model string, u usage, batch bool) {
	c, in := costOf(model, u, batch)
	r.mu.Lock()
	r.tokens.Input += int64(u.InputTokens)
	r.tokens.Output += int64(u.OutputTokens)
	r.tokens.CacheCreation += int64(u.CacheCreationInputTokens)
	r.tokens.CacheRead += int64(u.CacheReadInputTokens)
	r.cost += c
	r.inCost += in
	r.mu.Unlock()
}

// costOf prices a reply by the price table sluice prices its spend by
// (package price), in all and its input alone (uncached input, cache
// writes and cache reads); batch at the Message Batches price.
func costOf(model string, u usage, batch bool) (all, input float64) {
	c := price.Default().Cost(model, price.Usage{Input: int64(u.InputTokens), Output: int64(u.OutputTokens),
		CacheWrite5m: int64(u.CacheCreation.Ephemeral5m), CacheWrite1h: int64(u.CacheCreation.Ephemeral1h),
		CacheRead: int64(u.CacheReadInputTokens)}, batch)
	all = c.Total()
	return all, all - c.USD[price.Output]
}

// Stats returns a snapshot of the counters.
func (s *Server) Stats() Stats {
	inflight, peak := s.capacity.load()
	r := s.stats
	r.mu.Lock()
	defer r.mu.Unlock()
	st := Stats{Requests: r.requests, Inflight: int64(inflight), PeakInflight: int64(peak),
		ByStatus: make(map[string]int64, len(r.byStatus)), Tokens: r.tokens, CostUSD: r.cost, InputCostUSD: r.inCost}
	for code, n := range r.byStatus {
		st.ByStatus[strconv.Itoa(code)] = n
	}
	st.Credentials = make(map[string]int64, len(r.creds))
	for c, n := range r.creds {
		st.Credentials[c] = n
	}
	st.Backends = make(map[string]BackendStats, len(r.backends))
	for b, by := range r.backends {
		bs := BackendStats{ByStatus: make(map[string]int64, len(by))}
		for code, n := range by {
			bs.Requests += n
			bs.ByStatus[strconv.Itoa(code)] = n
		}
		st.Backends[b] = bs
	}
	return st
}

// Reset zeroes the stats, the peak, the prompt cache, the rate-limit
// buckets and the memory of "-once" faults.
func (s *Server) Reset() {
	r := s.stats
	r.mu.Lock()
	r.requests, r.tokens, r.cost, r.inCost = 0, TokenStats{}, 0, 0
	clear(r.byStatus)
	clear(r.creds)
	clear(r.backends)
	r.mu.Unlock()
	s.capacity.resetPeak()
	s.cache.reset()
	s.diag.reset()
	s.limits.reset()
	s.faults.reset()
}

func (s *Server) handleStats(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, s.Stats())
}

func (s *Server) handleReset(w http.ResponseWriter, _ *http.Request) {
	s.Reset()
	writeJSON(w, http.StatusOK, s.Stats())
}
