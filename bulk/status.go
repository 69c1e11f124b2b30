package bulk

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"
)

// The read side of the endpoint: a request's status (GET, long-polled
// with ?wait), the list of a credential's requests, a cancel.

// maxWait bounds a long poll.
const maxWait = 60 * time.Second

func (s *Service) handleGet(w http.ResponseWriter, r *http.Request, cred credential, id string) {
	var wait time.Duration
	if v := r.URL.Query().Get("wait"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			n, err2 := strconv.Atoi(v)
			d, err = time.Duration(n)*time.Second, err2
		}
		if err != nil || d < 0 {
			writeError(w, http.StatusBadRequest, "invalid_request_error", "wait must be a duration such as 30s (at most 60s), or whole seconds")
			return
		}
		wait = min(d, maxWait)
	}
	if wait > 0 {
		if s.longPolls.Add(1) > int64(s.cfg.MaxLongPolls) {
			s.longPolls.Add(-1)
			w.Header().Set("Retry-After", "1")
			writeError(w, 529, "overloaded_error", fmt.Sprintf(
				"sluice has %d long polls of bulk requests open, its bound; retry in a second, or read the request without ?wait=", s.cfg.MaxLongPolls))
			return
		}
		defer s.longPolls.Add(-1)
	}
	key := ownerOf(r, cred)
	ctx, cancel := context.WithTimeout(r.Context(), wait)
	defer cancel()
	tick := time.NewTicker(time.Second) // another replica may store the result
	defer tick.Stop()
	for {
		// Watched before the read, so that an end between the two wakes
		// this poll.
		ch, release := (<-chan struct{})(nil), func() {}
		if wait > 0 {
			ch, release = s.watch(id)
		}
		req, err := s.store.get(r.Context(), key, id)
		s.pollReads.Add(1)
		if err != nil || req == nil || req.Status == StatusEnded || ctx.Err() != nil || wait == 0 {
			release()
			switch {
			case err != nil:
				if r.Context().Err() == nil {
					writeError(w, http.StatusInternalServerError, "api_error", "sluice could not read the request; retry")
				}
			case req == nil:
				writeError(w, http.StatusNotFound, "not_found_error", "bulk request "+strconv.Quote(id)+" not found for this API key; list yours with GET /v1/bulk/messages")
			default:
				writeJSON(w, http.StatusOK, view(req))
			}
			return
		}
		select {
		case <-ch:
		case <-tick.C:
		case <-ctx.Done():
		case <-s.ctx.Done():
			release()
			writeJSON(w, http.StatusOK, view(req))
			return
		}
		release()
	}
}

var listStatuses = map[string]bool{StatusQueued: true, StatusSubmitting: true, StatusInProgress: true, StatusEnded: true}

func (s *Service) handleList(w http.ResponseWriter, r *http.Request, cred credential) {
	q := r.URL.Query()
	limit := 20
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1000 {
			writeError(w, http.StatusBadRequest, "invalid_request_error", "limit must be a whole number from 1 to 1000")
			return
		}
		limit = n
	}
	status := q.Get("status")
	if status != "" && !listStatuses[status] {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "status must be one of queued, submitting, in_progress, ended")
		return
	}
	if !storable(q.Get("after_id")) || !storable(q.Get("before_id")) {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "after_id and before_id must be ids of bulk requests, as the list gave them")
		return
	}
	if q.Get("after_id") != "" && q.Get("before_id") != "" {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "give after_id or before_id, not both")
		return
	}
	rs, more, err := s.store.list(r.Context(), ownerOf(r, cred), status, q.Get("after_id"), q.Get("before_id"), limit)
	if err != nil {
		writeError(w, http.StatusInternalServerError, "api_error", "sluice could not list requests; retry")
		return
	}
	page := struct {
		Data    []requestView `json:"data"`
		HasMore bool          `json:"has_more"`
		FirstID *string       `json:"first_id"`
		LastID  *string       `json:"last_id"`
	}{Data: make([]requestView, len(rs)), HasMore: more}
	for i, r := range rs {
		page.Data[i] = view(r)
	}
	if len(rs) > 0 {
		page.FirstID, page.LastID = &rs[0].ID, &rs[len(rs)-1].ID
	}
	writeJSON(w, http.StatusOK, page)
}

func (s *Service) handleCancel(w http.ResponseWriter, r *http.Request, cred credential, id string) {
	key := ownerOf(r, cred)
	req, err := s.store.cancel(r.Context(), key, id)
	if err != nil {
		writeError(w, http.StatusInternalServerError, "api_error", "sluice could not cancel the request; retry")
		return
	}
	if req == nil {
		writeError(w, http.StatusNotFound, "not_found_error", "bulk request "+strconv.Quote(id)+" not found for this API key; list yours with GET /v1/bulk/messages")
		return
	}
	if req.Status == StatusEnded {
		s.withdraw(key, id)
		s.ended(id)
	}
	writeJSON(w, http.StatusOK, view(req))
}

// requestView is a bulk request as the API shows it.
type requestView struct {
	ID              string          `json:"id"`
	Type            string          `json:"type"`
	Status          string          `json:"status"`
	Model           string          `json:"model"`
	CreatedAt       string          `json:"created_at"`
	EndedAt         *string         `json:"ended_at"`
	BatchID         *string         `json:"batch_id"`
	CancelRequested bool            `json:"cancel_requested"`
	Result          json.RawMessage `json:"result,omitempty"`
}

func view(r *Request) requestView {
	v := requestView{ID: r.ID, Type: "bulk_message", Status: r.Status, Model: r.Model, CancelRequested: r.Canceled,
		CreatedAt: time.UnixMilli(r.CreatedAt).UTC().Format(time.RFC3339Nano), Result: r.Result}
	if r.EndedAt > 0 {
		t := time.UnixMilli(r.EndedAt).UTC().Format(time.RFC3339Nano)
		v.EndedAt = &t
	}
	if r.UpstreamBatch != "" {
		b := r.UpstreamBatch
		v.BatchID = &b
	}
	return v
}
