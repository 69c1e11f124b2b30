package sim

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

func TestBatchItemErrorExpiryAndCounts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := New(Config{BatchDuration: 2 * time.Second})
		defer s.Close()
		bad := `{"custom_id":"bad","params":{"model":"claude-sonnet-4-5","max_tokens":8,"messages":[{"role":"user","content":"sim-fault:item-error"}]}}`
		body := strings.TrimSuffix(batchBody("ok1"), `]}`) + "," + bad + `]}`
		var b batchView
		json.Unmarshal(call(s, "POST", "/v1/messages/batches", body).Body.Bytes(), &b)
		time.Sleep(3 * time.Second)
		synctest.Wait()
		res := call(s, "GET", "/v1/messages/batches/"+b.ID+"/results", "").Body.String()
		types := map[string]string{}
		for _, line := range strings.Split(strings.TrimSpace(res), "\n") {
			var l struct {
				CustomID string `json:"custom_id"`
				Result   struct {
					Type string `json:"type"`
				} `json:"result"`
			}
			json.Unmarshal([]byte(line), &l)
			types[l.CustomID] = l.Result.Type
		}
		if types["ok1"] != "succeeded" || types["bad"] != "errored" {
			t.Errorf("result types = %v; want ok1 succeeded and bad errored", types)
		}

		// A batch slower than its expiry expires.
		s.SetBatchFaults(BatchFaults{Duration: time.Hour, Expiry: time.Minute})
		json.Unmarshal(call(s, "POST", "/v1/messages/batches", batchBody("e1", "ok1")).Body.Bytes(), &b)
		time.Sleep(2 * time.Minute)
		synctest.Wait()
		if v := getBatch(t, s, "GET", "/v1/messages/batches/"+b.ID); v.Status != "ended" || v.Counts.Expired != 2 {
			t.Errorf("slow batch: %+v; want ended with 2 expired", v)
		}
		got := s.CustomIDCounts()
		if got["ok1"] != 2 || got["bad"] != 1 || got["e1"] != 1 {
			t.Errorf("CustomIDCounts = %v; want ok1 2, bad 1, e1 1", got)
		}
	})
}

func TestBatchCreateAnswerLost(t *testing.T) {
	s := New(Config{})
	defer s.Close()
	srv := httptest.NewServer(s)
	defer srv.Close()
	s.SetBatchFaults(BatchFaults{LoseCreateAnswers: 1})
	post := func() (*http.Response, error) {
		req, _ := http.NewRequest("POST", srv.URL+"/v1/messages/batches", strings.NewReader(batchBody("a")))
		req.Header.Set("x-api-key", "k")
		return http.DefaultClient.Do(req)
	}
	if resp, err := post(); err == nil {
		resp.Body.Close()
		t.Fatalf("create with a lost answer got %d; want the connection dropped", resp.StatusCode)
	}
	// The batch was made all the same: it is listed, and a's count is 1.
	req, _ := http.NewRequest("GET", srv.URL+"/v1/messages/batches", nil)
	req.Header.Set("x-api-key", "k")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if strings.Count(string(b), `"id":"msgbatch_`) != 1 || s.CustomIDCounts()["a"] != 1 {
		t.Errorf("after a lost answer: list %s, counts %v; want one batch holding a", b, s.CustomIDCounts())
	}
	resp, err = post() // the fault was for one create only
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("next create: %v %v", resp, err)
	}
	resp.Body.Close()
}
