package web

import (
	"context"
	"encoding/json"
	"net/http"
	"sync"
	"time"

	"github.com/sluicehq/sluice/bulk"
)

// BulkBatches lists the bulk endpoint's newest batches (bulk.Service does).
type BulkBatches interface {
	Batches(ctx context.Context, n int) ([]bulk.BatchView, error)
}

const (
	liveBatches = 20
	// bulkEvery is how stale the batches the page shows may be: one store
	// query a second at most, however many tabs are open.
	bulkEvery = time.Second
)

// LiveBatch is one bulk batch as the page shows it: its progress counts
// and the requests still waiting for a result.
type LiveBatch struct {
	bulk.BatchView
	Pending int `json:"pending"`
}

// bulkUpdate is GET /ui/api/bulk's answer.
type bulkUpdate struct {
	Enabled bool        `json:"enabled"` // BULK_ENABLED
	NowMS   int64       `json:"now_ms"`
	Batches []LiveBatch `json:"batches"` // newest first
}

// bulkFeed caches the last answer for bulkEvery.
type bulkFeed struct {
	src BulkBatches

	mu   sync.Mutex
	at   time.Time
	last []byte
}

// bulk serves GET /ui/api/bulk: the newest bulk batches, or enabled false
// when this sluice has no bulk endpoint.
func (h *Handler) bulk(w http.ResponseWriter, r *http.Request) {
	f := h.bulkFeed
	if f.src == nil {
		writeJSONBody(w, bulkUpdate{Batches: []LiveBatch{}})
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.last == nil || time.Since(f.at) >= bulkEvery {
		ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
		bs, err := f.src.Batches(ctx, liveBatches)
		cancel()
		if err != nil {
			writeError(w, http.StatusInternalServerError, "api_error", "sluice could not read its bulk batches from the store; reload in a moment")
			return
		}
		u := bulkUpdate{Enabled: true, NowMS: time.Now().UnixMilli(), Batches: make([]LiveBatch, len(bs))}
		for i, b := range bs {
			u.Batches[i] = LiveBatch{BatchView: b, Pending: max(0, b.Count-b.Succeeded-b.Errored-b.Canceled-b.Expired)}
		}
		f.last, _ = json.Marshal(u)
		f.at = time.Now()
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.Write(f.last)
}

func writeJSONBody(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	json.NewEncoder(w).Encode(v)
}
