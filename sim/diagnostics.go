package sim

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sluicehq/sluice/apierror"
)

// Cache diagnostics, as the API's cache-diagnostics page documents them
// (GA; the cache-diagnosis-2026-04-07 beta header is no longer needed, and
// still accepted). A request that carries a "diagnostics" object opts in:
// the API keeps a fingerprint of it under its response's id (nothing for a
// request without the object), and when the object names a
// previous_message_id it compares the new request with that fingerprint
// and answers, in the response's diagnostics member (in message_start when
// streamed), the first divergence:
//
//   - null: nothing to compare (previous_message_id null, the first turn)
//     or nothing diverged (the history only grew);
//   - {"cache_miss_reason": {"type": "model_changed" | "tools_changed" |
//     "system_changed" | "messages_changed", "cache_missed_input_tokens": N}},
//     N the previous request's cached tokens from the divergence on;
//   - {"cache_miss_reason": {"type": "previous_message_not_found"}}: no
//     fingerprint under that id in the caller's workspace (the previous
//     request sent no diagnostics object, another workspace sent it, or
//     it has aged out);
//   - {"cache_miss_reason": {"type": "unavailable"}}: model, tools and
//     system match but another parameter that shapes the prompt differs
//     (tool_choice, thinking, context_management, output_config,
//     output_format, the set of anthropic-beta values).
//
// The API may also answer {"cache_miss_reason": null} while its comparison
// is still running; the simulator compares at once and never does. The
// feature is the Claude API's only: the cloud paths answer no diagnostics.

// diagRetention is how long a fingerprint is kept ("retained for a
// limited time": an hour here, past the longest cache ttl).
const diagRetention = time.Hour

// maxFingerprints bounds the store; past it, the oldest half goes.
const maxFingerprints = 1 << 15

// fingerprint is what a request's diagnosis compares: hashes and token
// counts only, as the API keeps, never the prompt.
type fingerprint struct {
	scope        string
	at           time.Time
	model        string
	tools        [32]byte
	system       [32]byte
	params       [32]byte
	messages     [][32]byte // one per message
	toolsTokens  int        // tokens of the tools
	systemTokens int        // tokens of tools and system
	beforeMsg    []int      // tokens before each message
	cached       int        // tokens up to the last breakpoint (all, without one)
}

type diagStore struct {
	mu sync.Mutex
	m  map[string]*fingerprint
}

func newDiagStore() *diagStore { return &diagStore{m: map[string]*fingerprint{}} }

func (d *diagStore) keep(id string, fp *fingerprint, now time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	fp.at = now
	d.m[id] = fp
	if len(d.m) > maxFingerprints {
		ats := make([]time.Time, 0, len(d.m))
		for _, f := range d.m {
			ats = append(ats, f.at)
		}
		slices.SortFunc(ats, func(a, b time.Time) int { return a.Compare(b) })
		cut := ats[len(ats)/2]
		for k, f := range d.m {
			if f.at.Before(cut) || now.Sub(f.at) > diagRetention {
				delete(d.m, k)
			}
		}
	}
}

func (d *diagStore) get(id, scope string, now time.Time) *fingerprint {
	d.mu.Lock()
	defer d.mu.Unlock()
	fp := d.m[id]
	if fp == nil || fp.scope != scope || now.Sub(fp.at) > diagRetention {
		return nil
	}
	return fp
}

func (d *diagStore) reset() {
	d.mu.Lock()
	clear(d.m)
	d.mu.Unlock()
}

// parseDiagnostics reads the request's diagnostics member: opted is false
// when it is absent or null; a member of the wrong shape is a 400.
func parseDiagnostics(raw json.RawMessage) (opted bool, prev string, aerr *apierror.Error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return false, "", nil
	}
	if raw[0] != '{' {
		return false, "", errInvalid(`diagnostics: must be an object such as {"previous_message_id": null}`)
	}
	var d struct {
		PreviousMessageID json.RawMessage `json:"previous_message_id"`
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		return false, "", errInvalid("diagnostics: " + err.Error())
	}
	id := bytes.TrimSpace(d.PreviousMessageID)
	if len(id) == 0 || string(id) == "null" {
		return true, "", nil
	}
	if json.Unmarshal(id, &prev) != nil || prev == "" {
		return false, "", errInvalid("diagnostics.previous_message_id: must be the id of a previous response (a string) or null")
	}
	return true, prev, nil
}

// diagnose fills x's diagnostics: the answer to its diagnostics object and
// the fingerprint to keep under its id. The request was validated already
// (decodeMessages checked the member's shape).
func (s *Server) diagnose(x *exchange, r *http.Request, now time.Time) {
	opted, prevID, _ := parseDiagnostics(x.req.Diagnostics)
	if !opted || cloudCredential(r) {
		return
	}
	x.fp = newFingerprint(x.p, x.req, r.Header, x.org)
	if prevID == "" {
		x.diag = json.RawMessage("null")
		return
	}
	prev := s.diag.get(prevID, x.org, now)
	if prev == nil {
		x.diag = missReason("previous_message_not_found", -1)
		return
	}
	x.diag = compareFingerprints(prev, x.fp)
}

// cloudCredential tells a request the cloud paths translated (cloudRequest
// gives it the cloud's credential): cache diagnostics are the Claude API's
// only.
func cloudCredential(r *http.Request) bool {
	k := r.Header.Get("X-Api-Key")
	return strings.HasPrefix(k, "bedrock ") || strings.HasPrefix(k, "vertex ")
}

// compareFingerprints is the diagnosis of cur against prev: the first
// divergence in the prompt's order (model, then tools, system, the other
// prompt-shaping parameters, messages), or null when the history only
// grew.
func compareFingerprints(prev, cur *fingerprint) json.RawMessage {
	missed := func(before int) int { return max(0, prev.cached-before) }
	switch {
	case prev.model != cur.model:
		return missReason("model_changed", missed(0))
	case prev.tools != cur.tools:
		return missReason("tools_changed", missed(0))
	case prev.system != cur.system:
		return missReason("system_changed", missed(prev.toolsTokens))
	case prev.params != cur.params:
		return missReason("unavailable", -1)
	}
	for i, h := range prev.messages {
		if i >= len(cur.messages) || cur.messages[i] != h {
			return missReason("messages_changed", missed(prev.beforeMsg[i]))
		}
	}
	return json.RawMessage("null")
}

// missReason is a diagnostics object naming why; tokens < 0 leaves out
// cache_missed_input_tokens (the two reasons that have none).
func missReason(typ string, tokens int) json.RawMessage {
	reason := map[string]any{"type": typ}
	if tokens >= 0 {
		reason["cache_missed_input_tokens"] = tokens
	}
	b, _ := json.Marshal(map[string]any{"cache_miss_reason": reason})
	return b
}

// newFingerprint hashes p's tools, system prompt and each message apart
// (canonical blocks, without cache_control and without the attribution
// line, which is outside the cached prompt), and the parameters whose
// change the API answers unavailable.
func newFingerprint(p *prompt, req *messagesRequest, h http.Header, scope string) *fingerprint {
	fp := &fingerprint{scope: scope, model: req.Model}
	nTools := len(p.tools)
	hash := func(from, to int) ([32]byte, int) {
		sh := sha256.New()
		tokens := 0
		for _, s := range p.segments[from:to] {
			if s.outside {
				continue
			}
			sh.Write(s.canon)
			sh.Write([]byte{0})
			tokens += s.tokens
		}
		var out [32]byte
		copy(out[:], sh.Sum(nil))
		return out, tokens
	}
	var n int
	fp.tools, n = hash(0, nTools)
	fp.toolsTokens = n
	fp.system, n = hash(nTools, p.msgStart)
	fp.systemTokens = fp.toolsTokens + n
	before := fp.systemTokens
	from := p.msgStart
	for _, end := range p.msgEnds {
		mh, n := hash(from, end)
		fp.messages = append(fp.messages, mh)
		fp.beforeMsg = append(fp.beforeMsg, before)
		before += n
		from = end
	}
	fp.cached = before
	if len(p.breakpoints) > 0 {
		fp.cached = p.breakpoints[len(p.breakpoints)-1].tokens
	}

	ph := sha256.New()
	for _, raw := range []json.RawMessage{req.ToolChoice, req.Thinking, req.ContextManagement, req.OutputConfig, req.OutputFormat} {
		ph.Write(bytes.TrimSpace(raw))
		ph.Write([]byte{0})
	}
	var betas []string
	for _, v := range h.Values("Anthropic-Beta") {
		for _, b := range strings.Split(v, ",") {
			if b = strings.TrimSpace(b); b != "" {
				betas = append(betas, b)
			}
		}
	}
	slices.Sort(betas)
	ph.Write([]byte(strings.Join(slices.Compact(betas), ",")))
	copy(fp.params[:], ph.Sum(nil))
	return fp
}
