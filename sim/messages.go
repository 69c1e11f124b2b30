package sim

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/apierror"
)

const maxOutputTokens = 128_000

func readAllLimited(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	return io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
}

// decodeMessages parses and validates a Messages request body. needMaxTokens
// is false for count_tokens, which takes no max_tokens.
func decodeMessages(body []byte, needMaxTokens bool) (*messagesRequest, *prompt, *apierror.Error) {
	var req messagesRequest
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&req); err != nil {
		return nil, nil, errInvalid("request body is not valid JSON for this endpoint: " + err.Error())
	}
	if strings.TrimSpace(req.Model) == "" {
		return nil, nil, errInvalid("model: field required; name a model such as claude-sonnet-4-5")
	}
	if needMaxTokens {
		if req.MaxTokens == nil {
			return nil, nil, errInvalid("max_tokens: field required")
		}
		if *req.MaxTokens < 1 {
			return nil, nil, errInvalid("max_tokens: must be at least 1")
		}
		// The largest output any current model allows; it also bounds the
		// memory a reply can take.
		if *req.MaxTokens > maxOutputTokens {
			return nil, nil, errInvalid("max_tokens: " + strconv.Itoa(*req.MaxTokens) + " > " + strconv.Itoa(maxOutputTokens) + ", the maximum allowed; lower max_tokens")
		}
	}
	if len(req.Messages) == 0 {
		return nil, nil, errInvalid("messages: field required; send at least one message")
	}
	if len(req.ToolChoice) > 0 && string(req.ToolChoice) != "null" {
		var tc toolChoice
		if err := json.Unmarshal(req.ToolChoice, &tc); err != nil {
			return nil, nil, errInvalid("tool_choice: must be an object")
		}
		switch tc.Type {
		case "auto", "any", "none":
		case "tool":
			if tc.Name == "" {
				return nil, nil, errInvalid("tool_choice.name: field required when tool_choice.type is \"tool\"")
			}
		default:
			return nil, nil, errInvalid("tool_choice.type: must be one of auto, any, tool, none")
		}
		if (tc.Type == "any" || tc.Type == "tool") && len(req.Tools) == 0 {
			return nil, nil, errInvalid("tool_choice: requires tools; add the tools the model may call")
		}
	}
	if _, _, aerr := parseDiagnostics(req.Diagnostics); aerr != nil {
		return nil, nil, aerr
	}
	p, aerr := parsePrompt(&req)
	if aerr != nil {
		return nil, nil, aerr
	}
	if len(req.ToolChoice) > 0 {
		var tc toolChoice
		_ = json.Unmarshal(req.ToolChoice, &tc)
		if tc.Type == "tool" && !p.hasTool(tc.Name) {
			return nil, nil, errInvalid("tool_choice.name: no tool named " + strconv.Quote(tc.Name) + " in tools")
		}
	}
	return &req, p, nil
}

func (p *prompt) hasTool(name string) bool {
	for _, t := range p.tools {
		if t.Name == name {
			return true
		}
	}
	return false
}

// exchange is one /v1/messages request on its way through the models.
type exchange struct {
	req   *messagesRequest
	p     *prompt
	rep   reply
	usage usage
	gen   *generation
	fault string
	id    string
	org   string    // whose prompt cache it reads and writes (cacheScope)
	read  cacheRead // the entry it reads, refreshed when it begins
	// diag is the response's diagnostics member (nil: none, when the
	// request sent no diagnostics object); fp is the request's
	// fingerprint, kept under its id when it begins (nil: not kept).
	diag json.RawMessage
	fp   *fingerprint
}

func (s *Server) handleMessages(w http.ResponseWriter, r *http.Request) {
	now := time.Now()
	lim := s.limits.of(r)
	body, aerr := readBody(w, r, maxMessagesBody)
	if aerr == nil && len(bytes.TrimSpace(body)) == 0 {
		aerr = errInvalid("request body is empty; send a JSON Messages request")
	}
	var req *messagesRequest
	var p *prompt
	if aerr == nil {
		req, p, aerr = decodeMessages(body, true)
	}
	if aerr != nil {
		lim.writeHeaders(w.Header(), now)
		writeError(w, aerr)
		return
	}

	fault, key := s.pickFault(r, p.hash)
	switch fault {
	case "403", "429", "500", "529":
		lim.writeHeaders(w.Header(), now)
		s.writeFault(w, r, fault, key)
		return
	}

	want := 0
	if v := r.Header.Get("x-sim-output-tokens"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			writeError(w, errInvalid("x-sim-output-tokens: must be a positive integer"))
			return
		}
		want = n
	}
	x := &exchange{req: req, p: p, fault: fault, id: "msg_" + s.newID(), org: s.cacheScope(r)}
	x.rep = s.generate(req, p, want)
	x.usage, x.read = s.cache.usageFor(p, x.org, s.minCacheTokens(req.Model), now)
	s.diagnose(x, r, now)
	x.usage.OutputTokens = x.rep.outputTokens
	x.usage.ServiceTier = "standard"

	if _, overloadAt := s.capacityAt(now); !s.capacity.enter(overloadAt) {
		lim.writeHeaders(w.Header(), now)
		writeError(w, apierror.New(529, "overloaded_error", "Overloaded: the simulator has "+strconv.Itoa(overloadAt)+" requests in flight; retry with backoff"))
		return
	}
	defer s.capacity.leave()

	in := x.usage.InputTokens + x.usage.CacheCreationInputTokens
	// The output-token limit is counted as the API documents it: max_tokens
	// at the start, adjusted to the tokens used once the answer has ended.
	if wait, ok := lim.admit(now, in, *req.MaxTokens); !ok {
		lim.writeHeaders(w.Header(), now)
		w.Header().Set("retry-after", strconv.FormatInt(ceilSeconds(wait), 10))
		writeError(w, apierror.New(429, "rate_limit_error", "This request would exceed your rate limit; retry after the time in the retry-after header"))
		return
	}
	lim.writeHeaders(w.Header(), now)
	defer lim.giveOutput(*req.MaxTokens - x.rep.outputTokens)

	if fault == "hang" {
		s.hang(w, r)
		return
	}

	x.gen = s.newGeneration(p.hash, x.usage.InputTokens+x.usage.CacheCreationInputTokens)
	if req.Stream {
		s.stream(w, r, x)
		return
	}
	s.respondJSON(w, r, x)
}

// begin marks the moment the response begins (the first token is ready):
// from now on the prompt's cache entries exist for later requests.
func (s *Server) begin(x *exchange) {
	now := time.Now()
	s.cache.commit(x.p, x.org, s.minCacheTokens(x.req.Model), now, x.read)
	if x.fp != nil {
		s.diag.keep(x.id, x.fp, now)
	}
}

func (s *Server) respondJSON(w http.ResponseWriter, r *http.Request, x *exchange) {
	ctx := r.Context()
	if err := x.gen.waitFor(ctx, x.gen.atToken(0)); err != nil {
		return // the client left; nothing to answer
	}
	s.begin(x)
	if err := x.gen.waitFor(ctx, x.gen.atToken(max(0, x.rep.outputTokens-1))); err != nil {
		return
	}
	if x.fault == "slow-stream" {
		if pause(ctx, s.cfg.SlowStreamInterval) != nil {
			return
		}
	}
	if x.fault == "midstream-error" {
		// A non-streamed reply cannot fail mid-way; it fails as a whole.
		writeError(w, apierror.New(529, "overloaded_error", "Overloaded (injected midstream-error on a non-streaming request)"))
		return
	}
	msg := x.rep.message(x.id, x.req.Model, x.usage)
	msg.Diagnostics = x.diag
	body, err := json.Marshal(msg)
	if err != nil {
		writeError(w, apierror.New(500, "api_error", "simulator could not encode its reply: "+err.Error()))
		return
	}
	body = append(body, '\n')
	h := w.Header()
	h.Set("Content-Type", "application/json")
	switch x.fault {
	case "bad-json":
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(body[:len(body)/2])
		return
	case "reset":
		h.Set("Content-Length", strconv.Itoa(len(body)))
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(body[:len(body)/2])
		dropConnection(w)
		return
	}
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(body)
	s.stats.record(x.req.Model, x.usage, false)
}

func ceilSeconds(d time.Duration) int64 {
	sec := int64((d + time.Second - 1) / time.Second)
	return max(sec, 1)
}

// handleCountTokens answers with the same estimate the rate limiter uses.
func (s *Server) handleCountTokens(w http.ResponseWriter, r *http.Request) {
	body, aerr := readBody(w, r, maxMessagesBody)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	_, p, aerr := decodeMessages(body, false)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	writeJSON(w, http.StatusOK, map[string]int{"input_tokens": p.total})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		writeError(w, apierror.New(500, "api_error", "simulator could not encode its answer: "+err.Error()))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(body, '\n'))
}
