package sim

import (
	"encoding/json"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

func batchBody(ids ...string) string {
	var parts []string
	for _, id := range ids {
		parts = append(parts, `{"custom_id":"`+id+`","params":`+helloBody+`}`)
	}
	return `{"requests":[` + strings.Join(parts, ",") + `]}`
}

type batchView struct {
	ID            string        `json:"id"`
	Status        string        `json:"processing_status"`
	Counts        requestCounts `json:"request_counts"`
	ResultsURL    *string       `json:"results_url"`
	CancelStarted *string       `json:"cancel_initiated_at"`
}

func getBatch(t *testing.T, s *Server, method, path string) batchView {
	t.Helper()
	w := call(s, method, path, "")
	var v batchView
	if w.Code != 200 || json.Unmarshal(w.Body.Bytes(), &v) != nil {
		t.Fatalf("%s %s: %d %s", method, path, w.Code, w.Body)
	}
	return v
}

func TestBatchLifecycle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := New(Config{BatchDuration: 4 * time.Second, BatchExpiry: time.Hour})
		defer s.Close()
		w := call(s, "POST", "/v1/messages/batches", batchBody("a", "b", "c", "d"))
		var b batchView
		if err := json.Unmarshal(w.Body.Bytes(), &b); err != nil || b.Status != "in_progress" || b.Counts.Processing != 4 || b.ResultsURL != nil {
			t.Fatalf("create: %d %s", w.Code, w.Body)
		}
		wantError(t, call(s, "GET", "/v1/messages/batches/"+b.ID+"/results", ""), 400, "invalid_request_error", "ended")
		wantError(t, call(s, "DELETE", "/v1/messages/batches/"+b.ID, ""), 400, "invalid_request_error", "cancel")

		time.Sleep(2*time.Second + time.Millisecond)
		if v := getBatch(t, s, "GET", "/v1/messages/batches/"+b.ID); v.Counts.Succeeded != 2 || v.Counts.Processing != 2 {
			t.Errorf("halfway: %+v; want 2 done, 2 processing", v.Counts)
		}
		v := getBatch(t, s, "POST", "/v1/messages/batches/"+b.ID+"/cancel")
		if v.Status != "canceling" || v.CancelStarted == nil {
			t.Errorf("cancel: %+v", v)
		}
		synctest.Wait()
		v = getBatch(t, s, "GET", "/v1/messages/batches/"+b.ID)
		if v.Status != "ended" || v.Counts.Canceled != 2 || v.Counts.Succeeded != 2 || v.ResultsURL == nil || *v.ResultsURL != "http://example.com/v1/messages/batches/"+b.ID+"/results" {
			t.Errorf("after cancel: %+v url %v", v, v.ResultsURL)
		}
		w = call(s, "GET", "/v1/messages/batches/"+b.ID+"/results", "")
		if w.Header().Get("Content-Type") != "application/x-jsonl" || strings.Count(w.Body.String(), "\n") != 4 || strings.Count(w.Body.String(), `"type":"canceled"`) != 2 {
			t.Errorf("results: %s %q", w.Header().Get("Content-Type"), w.Body)
		}
		if st := s.Stats(); st.Tokens.Output == 0 || st.CostUSD <= 0 {
			t.Errorf("batch usage missing from stats: %+v", st)
		}
	})
}

func TestBatchExpiryAndList(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := New(Config{BatchDuration: 30 * time.Hour, BatchExpiry: 24 * time.Hour}) // an item every 10h
		defer s.Close()
		var ids []string
		for range 3 {
			w := call(s, "POST", "/v1/messages/batches", batchBody("x", "y", "z"))
			var v batchView
			_ = json.Unmarshal(w.Body.Bytes(), &v)
			ids = append(ids, v.ID)
		}
		var p struct {
			Data    []batchView `json:"data"`
			HasMore bool        `json:"has_more"`
			FirstID string      `json:"first_id"`
			LastID  string      `json:"last_id"`
		}
		_ = json.Unmarshal(call(s, "GET", "/v1/messages/batches?limit=2", "").Body.Bytes(), &p)
		if len(p.Data) != 2 || !p.HasMore || p.FirstID != ids[2] || p.LastID != ids[1] {
			t.Errorf("page 1: %+v; want the two newest", p)
		}
		_ = json.Unmarshal(call(s, "GET", "/v1/messages/batches?limit=2&after_id="+p.LastID, "").Body.Bytes(), &p)
		if len(p.Data) != 1 || p.HasMore || p.FirstID != ids[0] {
			t.Errorf("page 2: %+v; want the oldest", p)
		}
		time.Sleep(25 * time.Hour)
		v := getBatch(t, s, "GET", "/v1/messages/batches/"+ids[0])
		if v.Status != "ended" || v.Counts.Expired != 1 || v.Counts.Succeeded != 2 {
			t.Errorf("after 24h: %+v; want 2 done (at 10h and 20h) and the third expired at 24h", v)
		}
	})
}

func TestBatchCreateErrors(t *testing.T) {
	s := New(Config{})
	defer s.Close()
	wantError(t, call(s, "POST", "/v1/messages/batches", batchBody("ok", "not ok!")), 400, "invalid_request_error", "custom_id")
	wantError(t, call(s, "POST", "/v1/messages/batches", batchBody("dup", "dup")), 400, "invalid_request_error", "unique")
	wantError(t, call(s, "POST", "/v1/messages/batches", `{"requests":[]}`), 400, "invalid_request_error", "requests")
}
