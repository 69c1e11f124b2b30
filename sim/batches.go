package sim

import (
	"bytes"
	"encoding/json"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/sluicehq/sluice/apierror"
	"github.com/sluicehq/sluice/catalog"
)

const maxBatchRequests = 100_000

var customIDPattern = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

// batch is one Message Batch. Its fields are guarded by batchStore.mu.
type batch struct {
	id         string
	created    time.Time
	expires    time.Time
	status     string // in_progress, canceling, ended
	endedAt    time.Time
	cancelAt   time.Time
	customIDs  []string
	duration   time.Duration
	params     []json.RawMessage
	results    [][]byte // one JSONL line per item once done
	counts     requestCounts
	cancelling chan struct{} // closed by cancel
}

type requestCounts struct {
	Processing int `json:"processing"`
	Succeeded  int `json:"succeeded"`
	Errored    int `json:"errored"`
	Canceled   int `json:"canceled"`
	Expired    int `json:"expired"`
}

type batchStore struct {
	mu    sync.Mutex
	byID  map[string]*batch
	order []*batch // creation order
	// seen counts how many times each custom_id reached a created batch:
	// a test checks that no request was submitted twice.
	seen map[string]int
	// fault and timing are set at run time (SetBatchFaults).
	faults BatchFaults
}

func newBatchStore() *batchStore {
	return &batchStore{byID: map[string]*batch{}, seen: map[string]int{}}
}

// BatchFaults are the Message Batches faults and speed a test controls at
// run time. Items also fail on their own: one whose params contain the
// text "sim-fault:item-error" ends errored with an api_error.
type BatchFaults struct {
	// LoseCreateAnswers is how many of the next creates make their batch
	// and then drop the connection instead of answering.
	LoseCreateAnswers int
	// HangCreateAnswers is how many of the next creates make their batch
	// and then hold the answer until the client leaves or the simulator
	// closes (a client killed mid-create).
	HangCreateAnswers int
	// Duration, if positive, replaces Config.BatchDuration for batches
	// created from now on; Expiry, if positive, Config.BatchExpiry (set it
	// below Duration and batches expire).
	Duration, Expiry time.Duration
	// Paused holds every batch's processing until cleared.
	Paused bool
}

// itemErrorMarker in an item's params makes it end errored.
const itemErrorMarker = "sim-fault:item-error"

// SetBatchFaults sets the batch faults and speed; the zero value clears them.
func (s *Server) SetBatchFaults(f BatchFaults) {
	st := s.batches
	st.mu.Lock()
	st.faults = f
	st.mu.Unlock()
}

// CustomIDCounts returns how many times each custom_id reached a created
// batch.
func (s *Server) CustomIDCounts() map[string]int {
	st := s.batches
	st.mu.Lock()
	defer st.mu.Unlock()
	out := make(map[string]int, len(st.seen))
	for k, v := range st.seen {
		out[k] = v
	}
	return out
}

func (s *Server) handleBatchItems(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{"custom_ids": s.CustomIDCounts()})
}

type batchJSON struct {
	ID                string        `json:"id"`
	Type              string        `json:"type"`
	ProcessingStatus  string        `json:"processing_status"`
	RequestCounts     requestCounts `json:"request_counts"`
	EndedAt           *string       `json:"ended_at"`
	CreatedAt         string        `json:"created_at"`
	ExpiresAt         string        `json:"expires_at"`
	ArchivedAt        *string       `json:"archived_at"`
	CancelInitiatedAt *string       `json:"cancel_initiated_at"`
	ResultsURL        *string       `json:"results_url"`
}

func timeString(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

func optTime(t time.Time) *string {
	if t.IsZero() {
		return nil
	}
	s := timeString(t)
	return &s
}

// view renders b; the caller holds the store lock. results_url points at
// whoever the client reached (Host and scheme of its request).
func (b *batch) view(r *http.Request) batchJSON {
	v := batchJSON{ID: b.id, Type: "message_batch", ProcessingStatus: b.status, RequestCounts: b.counts,
		EndedAt: optTime(b.endedAt), CreatedAt: timeString(b.created), ExpiresAt: timeString(b.expires),
		CancelInitiatedAt: optTime(b.cancelAt)}
	if b.status == "ended" {
		scheme := "http"
		if r.TLS != nil {
			scheme = "https"
		}
		u := scheme + "://" + r.Host + "/v1/messages/batches/" + b.id + "/results"
		v.ResultsURL = &u
	}
	return v
}

func (s *Server) handleBatchCreate(w http.ResponseWriter, r *http.Request) {
	body, aerr := readBody(w, r, maxBatchBody)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	var in struct {
		Requests []struct {
			CustomID string          `json:"custom_id"`
			Params   json.RawMessage `json:"params"`
		} `json:"requests"`
	}
	if err := json.Unmarshal(body, &in); err != nil {
		writeError(w, errInvalid("request body is not valid JSON for a batch: "+err.Error()))
		return
	}
	if len(in.Requests) == 0 {
		writeError(w, errInvalid("requests: field required; send at least one request"))
		return
	}
	if len(in.Requests) > maxBatchRequests {
		writeError(w, errInvalid("requests: at most 100000 requests per batch; split the work into several batches"))
		return
	}
	now := time.Now()
	s.batches.mu.Lock()
	f := s.batches.faults
	s.batches.mu.Unlock()
	expiry := s.cfg.BatchExpiry
	if f.Expiry > 0 {
		expiry = f.Expiry
	}
	b := &batch{id: "msgbatch_" + s.newID(), created: now, expires: now.Add(expiry), duration: s.cfg.BatchDuration,
		status: "in_progress", cancelling: make(chan struct{})}
	seen := make(map[string]bool, len(in.Requests))
	for i, req := range in.Requests {
		if !customIDPattern.MatchString(req.CustomID) {
			writeError(w, errInvalid("requests."+strconv.Itoa(i)+".custom_id: must match ^[a-zA-Z0-9_-]{1,64}$"))
			return
		}
		if seen[req.CustomID] {
			writeError(w, errInvalid("requests."+strconv.Itoa(i)+".custom_id: "+strconv.Quote(req.CustomID)+" is used twice; custom_id must be unique in a batch"))
			return
		}
		seen[req.CustomID] = true
		b.customIDs = append(b.customIDs, req.CustomID)
		b.params = append(b.params, req.Params)
	}
	b.results = make([][]byte, len(b.params))
	b.counts.Processing = len(b.params)

	st := s.batches
	st.mu.Lock()
	if s.ctx.Err() != nil {
		st.mu.Unlock()
		writeError(w, apierror.New(529, "overloaded_error", "simulator is shutting down; retry against a running one"))
		return
	}
	if st.faults.Duration > 0 {
		b.duration = st.faults.Duration
	}
	st.byID[b.id] = b
	st.order = append(st.order, b)
	for _, id := range b.customIDs {
		st.seen[id]++
	}
	lose, hang := st.faults.LoseCreateAnswers > 0, false
	if lose {
		st.faults.LoseCreateAnswers--
	} else if st.faults.HangCreateAnswers > 0 {
		st.faults.HangCreateAnswers--
		hang = true
	}
	s.wg.Add(1)
	v := b.view(r)
	st.mu.Unlock()
	go s.runBatch(b)
	switch {
	case lose:
		// Closed before a byte of the answer: the client cannot tell
		// whether the batch was made.
		if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
			conn.Close()
		}
	case hang:
		s.hang(w, r)
	default:
		writeJSON(w, http.StatusOK, v)
	}
}

// runBatch processes b's items evenly over BatchDuration until done,
// canceled, expired or the server closes.
func (s *Server) runBatch(b *batch) {
	defer s.wg.Done()
	st := s.batches
	step := b.duration / time.Duration(len(b.params))
	timer := time.NewTimer(0)
	defer timer.Stop()
	<-timer.C
	next := 0
	finish := func(kind string) {
		st.mu.Lock()
		defer st.mu.Unlock()
		line := []byte(`{"type":"` + kind + `"}`)
		for i := next; i < len(b.params); i++ {
			b.results[i] = resultLine(b.customIDs[i], line)
			b.counts.Processing--
			if kind == "canceled" {
				b.counts.Canceled++
			} else {
				b.counts.Expired++
			}
		}
		b.status, b.endedAt = "ended", time.Now()
	}
	paused := false
	for next < len(b.params) {
		untilExpiry := time.Until(b.expires)
		wait := step
		if paused {
			wait = max(step, 10*time.Millisecond)
		}
		timer.Reset(min(wait, max(untilExpiry, 0)))
		select {
		case <-s.ctx.Done():
			return
		case <-b.cancelling:
			finish("canceled")
			return
		case <-timer.C:
		}
		if !time.Now().Before(b.expires) {
			finish("expired")
			return
		}
		st.mu.Lock()
		paused = st.faults.Paused
		st.mu.Unlock()
		if paused {
			continue
		}
		line, ok := s.batchResult(b.customIDs[next], b.params[next])
		st.mu.Lock()
		b.results[next] = line
		b.counts.Processing--
		if ok {
			b.counts.Succeeded++
		} else {
			b.counts.Errored++
		}
		next++
		if next == len(b.params) {
			b.status, b.endedAt = "ended", time.Now()
		}
		st.mu.Unlock()
	}
}

func resultLine(customID string, result []byte) []byte {
	id, _ := json.Marshal(customID)
	out := append([]byte(`{"custom_id":`), id...)
	out = append(out, `,"result":`...)
	out = append(out, result...)
	return append(out, "}\n"...)
}

// batchResult answers one batch item: a whole Message, or the error its
// params would have got from /v1/messages.
func (s *Server) batchResult(customID string, params json.RawMessage) ([]byte, bool) {
	fail := func(e *apierror.Error) ([]byte, bool) {
		res, _ := json.Marshal(map[string]any{"type": "errored", "error": apierror.Envelope(e.Type, e.Message, "")})
		return resultLine(customID, res), false
	}
	if len(bytes.TrimSpace(params)) == 0 || string(params) == "null" {
		return fail(errInvalid("params: field required"))
	}
	if bytes.Contains(params, []byte(itemErrorMarker)) {
		return fail(apierror.New(500, "api_error", "Internal server error (injected item fault)"))
	}
	req, p, aerr := decodeMessages(params, true)
	if aerr != nil {
		return fail(aerr)
	}
	if req.Stream {
		return fail(errInvalid("stream: streaming is not supported in batches; remove \"stream\""))
	}
	rep := s.generate(req, p, 0)
	u := usage{InputTokens: p.total, OutputTokens: rep.outputTokens, ServiceTier: "batch"}
	s.stats.record(req.Model, u, true)
	res, err := json.Marshal(map[string]any{"type": "succeeded", "message": rep.message("msg_"+s.newID(), req.Model, u)})
	if err != nil {
		return fail(apierror.New(500, "api_error", "simulator could not encode a batch result"))
	}
	return resultLine(customID, res), true
}

func (s *Server) lookupBatch(w http.ResponseWriter, r *http.Request) *batch {
	id := r.PathValue("id")
	b := s.batches.byID[id]
	if b == nil {
		writeError(w, errNotFound("message batch "+strconv.Quote(id)+" not found; list batches with GET /v1/messages/batches"))
	}
	return b
}

func (s *Server) handleBatchGet(w http.ResponseWriter, r *http.Request) {
	st := s.batches
	st.mu.Lock()
	b := s.lookupBatch(w, r)
	var v batchJSON
	if b != nil {
		v = b.view(r)
	}
	st.mu.Unlock()
	if b != nil {
		writeJSON(w, http.StatusOK, v)
	}
}

func (s *Server) handleBatchList(w http.ResponseWriter, r *http.Request) {
	st := s.batches
	st.mu.Lock()
	views := make([]batchJSON, len(st.order))
	for i, b := range st.order {
		views[i] = b.view(r)
	}
	st.mu.Unlock()
	slices.Reverse(views) // newest first
	p, aerr := catalog.Paginate(r, views, func(v batchJSON) string { return v.ID })
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	writeJSON(w, http.StatusOK, p)
}

func (s *Server) handleBatchCancel(w http.ResponseWriter, r *http.Request) {
	st := s.batches
	st.mu.Lock()
	b := s.lookupBatch(w, r)
	if b == nil {
		st.mu.Unlock()
		return
	}
	if b.status == "in_progress" {
		b.status, b.cancelAt = "canceling", time.Now()
		close(b.cancelling)
	}
	v := b.view(r)
	st.mu.Unlock()
	writeJSON(w, http.StatusOK, v)
}

func (s *Server) handleBatchResults(w http.ResponseWriter, r *http.Request) {
	st := s.batches
	st.mu.Lock()
	b := s.lookupBatch(w, r)
	if b == nil {
		st.mu.Unlock()
		return
	}
	if b.status != "ended" {
		st.mu.Unlock()
		writeError(w, errInvalid("message batch "+b.id+" is still "+b.status+"; results are available once processing_status is \"ended\""))
		return
	}
	lines := slices.Clone(b.results)
	st.mu.Unlock()
	w.Header().Set("Content-Type", "application/x-jsonl")
	w.WriteHeader(http.StatusOK)
	for _, l := range lines {
		if _, err := w.Write(l); err != nil {
			return
		}
	}
}

func (s *Server) handleBatchDelete(w http.ResponseWriter, r *http.Request) {
	st := s.batches
	st.mu.Lock()
	b := s.lookupBatch(w, r)
	if b == nil {
		st.mu.Unlock()
		return
	}
	if b.status != "ended" {
		st.mu.Unlock()
		writeError(w, errInvalid("message batch "+b.id+" is "+b.status+"; cancel it and wait until it has ended before deleting it"))
		return
	}
	delete(st.byID, b.id)
	st.order = slices.DeleteFunc(st.order, func(x *batch) bool { return x == b })
	st.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]string{"id": b.id, "type": "message_batch_deleted"})
}
