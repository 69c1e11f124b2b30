package bulk

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/sluicehq/sluice/apierror"
	"github.com/sluicehq/sluice/budget"
	"github.com/sluicehq/sluice/price"
	"github.com/sluicehq/sluice/request"
)

// maxBody is the Messages API's body limit, which a bulk submission keeps.
const maxBody = 32 << 20

// ServeHTTP answers the bulk endpoint's routes under /v1/bulk/messages.
func (s *Service) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	path := strings.TrimSuffix(r.URL.Path, "/")
	rest, ok := strings.CutPrefix(path, "/v1/bulk/messages")
	if !ok || (rest != "" && rest[0] != '/') {
		writeError(w, http.StatusNotFound, "not_found_error", "no bulk route at "+r.URL.Path+"; the bulk endpoint is /v1/bulk/messages")
		return
	}
	cred, ok := credentialFrom(r)
	if !ok {
		writeError(w, http.StatusUnauthorized, "authentication_error", "missing credentials: send your API key in x-api-key (or Authorization: Bearer), as for /v1/messages")
		return
	}
	id, action, _ := strings.Cut(strings.TrimPrefix(rest, "/"), "/")
	if !storable(id) {
		// No id has such bytes, and PostgreSQL would fail the look-up.
		writeError(w, http.StatusNotFound, "not_found_error", "no bulk request has that id: ids are bulkmsg_ and hex digits, as the 202 gave them; list yours with GET /v1/bulk/messages")
		return
	}
	switch {
	case id == "" && r.Method == http.MethodPost:
		s.handleSubmit(w, r, cred)
	case id == "" && r.Method == http.MethodGet:
		s.handleList(w, r, cred)
	case id != "" && action == "" && r.Method == http.MethodGet:
		s.handleGet(w, r, cred, id)
	case id != "" && action == "cancel" && r.Method == http.MethodPost:
		s.handleCancel(w, r, cred, id)
	case id == "":
		methodNotAllowed(w, "GET, POST")
	case action == "":
		methodNotAllowed(w, "GET")
	case action == "cancel":
		methodNotAllowed(w, "POST")
	default:
		writeError(w, http.StatusNotFound, "not_found_error", "no bulk route at "+r.URL.Path+"; see docs/bulk.md")
	}
}

// storable reports whether s is text the store's TEXT columns take:
// UTF-8 without NUL (PostgreSQL refuses anything else, and the statement,
// with its whole transaction, fails).
func storable(s string) bool { return utf8.ValidString(s) && !strings.ContainsRune(s, 0) }

func methodNotAllowed(w http.ResponseWriter, allow string) {
	w.Header().Set("Allow", allow)
	writeError(w, http.StatusMethodNotAllowed, "invalid_request_error", "method not allowed on this path; use "+allow)
}

// credentialFrom returns the request's API key as it was sent.
func credentialFrom(r *http.Request) (credential, bool) {
	if v := strings.TrimSpace(r.Header.Get("x-api-key")); v != "" {
		return credential{"x-api-key", v}, true
	}
	if v := r.Header.Get("Authorization"); strings.HasPrefix(v, "Bearer ") && strings.TrimSpace(v[7:]) != "" {
		return credential{"Authorization", v}, true
	}
	return credential{}, false
}

// hash is the credential's short hash: the only form of it in a row key,
// a log or the page.
func (c credential) hash() string {
	h := sha256.Sum256(c.bytes())
	return hex.EncodeToString(h[:16])
}

// ownerOf is the short hash of whoever r's bulk requests belong to: its
// credential's, or, when sluice authenticated the client itself (inbound
// keys: every request then carries the one upstream key sluice holds),
// its caller's. A credential is stored under its owner's hash, so each
// sluice key's requests go upstream in batches of their own, billed to
// the held key.
func ownerOf(r *http.Request, cred credential) string {
	caller, ok := request.CallerOf(r.Context())
	if !ok {
		return cred.hash()
	}
	h := sha256.Sum256([]byte("caller\n" + caller))
	return hex.EncodeToString(h[:16])
}

func (s *Service) handleSubmit(w http.ResponseWriter, r *http.Request, cred credential) {
	refuse := func(status int, typ, msg string) {
		s.m.submissions.WithLabelValues("refused").Inc()
		writeError(w, status, typ, msg)
	}
	if s.cfg.Budgets != nil { // before the body is read: a spent budget's answer costs nothing
		e := s.cfg.Budgets.Over(SpendTenant, ownerOf(r, cred)[:16])
		if e == nil {
			e = s.cfg.Budgets.OverMember(budget.MemberFrom(r.Context()))
		}
		if e != nil {
			s.m.submissions.WithLabelValues("refused").Inc()
			apierror.WriteSluice(w, e)
			return
		}
	}
	if r.ContentLength > maxBody {
		refuse(http.StatusRequestEntityTooLarge, "request_too_large", "request body exceeds the 32 MB limit of a Messages request; send a smaller request")
		return
	}
	hold := r.ContentLength
	if hold < 0 {
		hold = maxBody
	}
	if !s.budget.take(hold) {
		w.Header().Set("Retry-After", "1")
		refuse(529, "overloaded_error", "sluice holds as many bulk bodies as it may at once; retry after retry-after")
		return
	}
	defer s.budget.give(hold)
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			refuse(http.StatusRequestEntityTooLarge, "request_too_large", "request body exceeds the 32 MB limit of a Messages request; send a smaller request")
			return
		}
		refuse(http.StatusBadRequest, "invalid_request_error", "could not read the request body: "+err.Error())
		return
	}
	var head struct {
		Model  string          `json:"model"`
		Stream json.RawMessage `json:"stream"`
	}
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) == 0 || trimmed[0] != '{' || json.Unmarshal(trimmed, &head) != nil {
		refuse(http.StatusBadRequest, "invalid_request_error", "the request body must be a JSON object: a Messages request with model, max_tokens and messages, as sent to /v1/messages")
		return
	}
	if string(head.Stream) == "true" {
		refuse(http.StatusBadRequest, "invalid_request_error", `stream: a bulk request is answered later, not streamed; remove "stream": true (or send it to /v1/messages)`)
		return
	}
	// What goes into the store's text columns must be text PostgreSQL
	// takes, UTF-8 without NUL: one that is not fails the group commit's
	// whole transaction, and with it every other submission in the group.
	if !storable(head.Model) {
		refuse(http.StatusBadRequest, "invalid_request_error", "model holds a NUL character (\\u0000), which no model name has; send the model's name, such as claude-sonnet-4-5")
		return
	}
	idem := r.Header.Get("Idempotency-Key")
	if len(idem) > 255 {
		refuse(http.StatusBadRequest, "invalid_request_error", "Idempotency-Key is longer than 255 characters; use a shorter key, such as a UUID")
		return
	}
	if !storable(idem) {
		refuse(http.StatusBadRequest, "invalid_request_error", "Idempotency-Key is not UTF-8 text; use a key of printable characters, such as a UUID")
		return
	}
	hook := r.Header.Get(HeaderWebhookURL)
	if !storable(hook) {
		refuse(http.StatusBadRequest, "invalid_request_error", HeaderWebhookURL+" is not UTF-8 text; send the URL with non-ASCII characters percent-encoded")
		return
	}
	if hook != "" {
		u, err := url.Parse(hook)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			refuse(http.StatusBadRequest, "invalid_request_error", HeaderWebhookURL+" must be an absolute http:// or https:// URL")
			return
		}
		if s.cfg.WebhookSecret == "" {
			refuse(http.StatusBadRequest, "invalid_request_error", "this sluice has no BULK_WEBHOOK_SECRET to sign webhooks with; ask its operator to set one, or poll GET /v1/bulk/messages/{id}")
			return
		}
	}
	if n := int64(len(trimmed)); n > s.cfg.MaxPendingBytes {
		// Never storable, however many of the key's requests end.
		refuse(http.StatusRequestEntityTooLarge, "request_too_large", fmt.Sprintf("request body of %s exceeds the quota of %s (BULK_MAX_PENDING_MB) that one API key may have stored at once; send a smaller request",
			byteSize(n), byteSize(s.cfg.MaxPendingBytes)))
		return
	}
	sum := sha256.Sum256(trimmed)
	key := ownerOf(r, cred)
	reserved, aerr := s.reserve(key, budget.MemberFrom(r.Context()), trimmed, r.Header)
	if aerr != nil {
		s.m.submissions.WithLabelValues("refused").Inc()
		apierror.WriteSluice(w, aerr)
		return
	}
	kept := false
	defer func() {
		if !kept {
			reserved.Release()
		}
	}()
	if hook == "" {
		hook = s.cfg.KeyWebhooks[key] // the key's default, if it has one
	}
	nr := &newRequest{Request: Request{ID: newID("bulkmsg_"), KeyHash: key, Model: head.Model, Status: StatusQueued, CreatedAt: nowMS()},
		idemKey: idem, bodyHash: hex.EncodeToString(sum[:]), body: trimmed, webhook: hook, sealed: s.seal.seal(cred.bytes(), key)}
	if err := s.submit(r.Context(), nr); err != nil {
		if errors.Is(err, errStopping) {
			w.Header().Set("Retry-After", "1")
			refuse(529, "overloaded_error", "sluice is shutting down and stores no new bulk requests; retry against another instance or in a moment")
			return
		}
		if r.Context().Err() != nil {
			return
		}
		s.log.Error("bulk: a submission could not be stored", "err", err)
		refuse(http.StatusInternalServerError, "api_error", "sluice could not store the request; it was not accepted: retry it")
		return
	}
	var quota *quotaError
	switch {
	case errors.As(nr.err, &quota):
		// 429, not 413: the request is not too large in itself; the same
		// one is taken once some of the key's earlier submissions end.
		// Batches take minutes to hours, so a minute is the soonest a
		// retry is worth making.
		w.Header().Set("Retry-After", strconv.Itoa(quotaRetryAfter))
		refuse(http.StatusTooManyRequests, "rate_limit_error", quota.Error()+". Retry once some of them have ended (GET /v1/bulk/messages?status=queued lists them), or ask the operator to raise BULK_MAX_PENDING_MB")
		return
	case nr.err != nil:
		refuse(http.StatusConflict, "invalid_request_error", "Idempotency-Key "+strconv.Quote(idem)+" was already used with a different body; use a new key for a new request")
		return
	case nr.existing != nil:
		s.m.submissions.WithLabelValues("duplicate").Inc()
		ex, err := s.store.get(r.Context(), key, nr.existing.ID)
		if err != nil || ex == nil {
			ex = nr.existing
		}
		writeJSON(w, http.StatusAccepted, view(ex))
		return
	}
	s.m.submissions.WithLabelValues("accepted").Inc()
	if reserved != nil {
		s.mu.Lock()
		s.holds[nr.ID], kept = reserved, true
		s.mu.Unlock()
	}
	writeJSON(w, http.StatusAccepted, view(&nr.Request))
}

// reserve holds the estimated cost of the bulk request body, owned by
// key, against the budgets (Config.Budgets): its prompt's estimated
// tokens and its max_tokens, as the pacing estimates a request, priced
// at the batch price, and against the submitter's own budgets of their
// groups' budgets (m). It is the 402 to answer with when that does not
// fit; nil, nil without budgets.
func (s *Service) reserve(key string, m budget.Member, body []byte, h http.Header) (*budget.Reservation, *apierror.Error) {
	if s.cfg.Budgets == nil {
		return nil, nil
	}
	return s.cfg.Budgets.Reserve(SpendTenant, key[:16], m, estimate(s.prices(), body, h))
}

// estimate is what the Messages request body is expected to cost at the
// batch price: its prompt's estimated input tokens and its max_tokens of
// output (request.Descriptor.Cost, the pacing's estimate). A body the
// parse refuses is estimated from what it read (the upstream will refuse
// it, for nothing).
func estimate(prices *price.Table, body []byte, h http.Header) budget.Estimate {
	d, _ := request.Parse(body, h)
	in, out := int64(d.Cost.InputTokens), int64(d.Cost.MaxTokens)
	c := prices.Cost(d.Model, price.UsageOf(in, out, 0, 0, 0), true)
	return budget.Estimate{USD: c.Total(), Tokens: float64(in + out)}
}

// prices is the table results are priced by.
func (s *Service) prices() *price.Table {
	if s.cfg.Spend != nil {
		return s.cfg.Spend.Prices()
	}
	return price.Default()
}

// quotaRetryAfter is the retry-after, in seconds, of a submission past
// its key's quota (Config.MaxPendingBytes).
const quotaRetryAfter = 60

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, _ := json.Marshal(v)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}

// writeError writes an Anthropic-shaped error, with the request id the
// proxy set, so that the error, its header and the access line agree.
func writeError(w http.ResponseWriter, status int, typ, msg string) {
	apierror.WriteSluice(w, apierror.New(status, typ, msg))
}

// byteQuota bounds the submission bodies held in memory at once.
type byteQuota struct {
	mu    sync.Mutex
	held  int64
	limit int64
}

func (b *byteQuota) take(n int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.held+n > b.limit {
		return false
	}
	b.held += n
	return true
}

func (b *byteQuota) give(n int64) {
	b.mu.Lock()
	b.held -= n
	b.mu.Unlock()
}

// Batches returns the newest bulk batches, for the page.
func (s *Service) Batches(ctx context.Context, limit int) ([]BatchView, error) {
	return s.store.recentBatches(ctx, limit)
}
