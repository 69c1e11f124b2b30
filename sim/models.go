package sim

import (
	"net/http"
	"strconv"
)

type model struct {
	Type        string `json:"type"`
	ID          string `json:"id"`
	DisplayName string `json:"display_name"`
	CreatedAt   string `json:"created_at"`
}

// models is the simulator's catalogue, newest first as the API lists it.
var models = []model{
	{"model", "claude-opus-4-5", "Claude Opus 4.5", "2025-11-24T00:00:00Z"},
	{"model", "claude-haiku-4-5", "Claude Haiku 4.5", "2025-10-15T00:00:00Z"},
	{"model", "claude-sonnet-4-5", "Claude Sonnet 4.5", "2025-09-29T00:00:00Z"},
	{"model", "claude-opus-4-1", "Claude Opus 4.1", "2025-08-05T00:00:00Z"},
	{"model", "claude-3-5-haiku-20241022", "Claude Haiku 3.5", "2024-10-22T00:00:00Z"},
}

// page is the API's list envelope.
type page[T any] struct {
	Data    []T     `json:"data"`
	HasMore bool    `json:"has_more"`
	FirstID *string `json:"first_id"`
	LastID  *string `json:"last_id"`
}

// paginate cuts a newest-first list by the API's limit, after_id and
// before_id query parameters.
func paginate[T any](r *http.Request, items []T, id func(T) string) (page[T], *apiError) {
	q := r.URL.Query()
	limit := 20
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1000 {
			return page[T]{}, errInvalid("limit: must be an integer from 1 to 1000")
		}
		limit = n
	}
	lo, hi := 0, len(items)
	if after := q.Get("after_id"); after != "" {
		lo = len(items)
		for i, it := range items {
			if id(it) == after {
				lo = i + 1
			}
		}
	}
	if before := q.Get("before_id"); before != "" {
		hi = 0
		for i, it := range items {
			if id(it) == before {
				hi = i
			}
		}
		// before_id pages backwards: the items just before the cursor.
		if hi > lo && hi-lo > limit {
			lo = hi - limit
		}
	}
	if hi < lo {
		hi = lo
	}
	p := page[T]{Data: items[lo:hi]}
	if len(p.Data) > limit {
		p.Data, p.HasMore = p.Data[:limit], true
	} else if q.Get("before_id") != "" && lo > 0 {
		p.HasMore = true
	}
	if len(p.Data) > 0 {
		first, last := id(p.Data[0]), id(p.Data[len(p.Data)-1])
		p.FirstID, p.LastID = &first, &last
	}
	if p.Data == nil {
		p.Data = []T{}
	}
	return p, nil
}

func (s *Server) handleModelList(w http.ResponseWriter, r *http.Request) {
	p, aerr := paginate(r, models, func(m model) string { return m.ID })
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	writeJSON(w, http.StatusOK, p)
}

func (s *Server) handleModelGet(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	for _, m := range models {
		if m.ID == id {
			writeJSON(w, http.StatusOK, m)
			return
		}
	}
	writeError(w, errNotFound("model: "+id+" is not a known model; list them with GET /v1/models"))
}
