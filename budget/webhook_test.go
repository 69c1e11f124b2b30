package budget

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The webhook hears a budget's warning and its crossing, once a period
// each, as JSON; a delivery that fails is tried again.
func TestWebhookHearsWarningAndCrossing(t *testing.T) {
	var mu sync.Mutex
	var got []Event
	fails := 1
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if fails > 0 { // the first delivery fails: it is sent again
			fails--
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		var e Event
		b, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(b, &e); err != nil || r.Header.Get("Content-Type") != "application/json" {
			t.Errorf("not a JSON event: %s", b)
		}
		got = append(got, e)
	}))
	defer srv.Close()
	s := mustSet(t, nil, Spec{Name: "team", Tenant: "a", Limit: 10, Warn: 5, Period: Day})
	stop := s.Notify(srv.URL+"/hook?token=secret", nil)
	spendUSD(s, "a", 6)
	spendUSD(s, "a", 1) // no news
	spendUSD(s, "a", 4)
	spendUSD(s, "a", 4) // no news
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		n := len(got)
		mu.Unlock()
		if n >= 2 || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	stop()
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 2 || got[0].Type != "budget_warning" || got[0].Spent != 6 || got[1].Type != "budget_exceeded" || got[1].Spent != 11 ||
		got[1].Limit != 10 || got[1].Budget != "team" || got[1].Tenant != "a" || got[1].ResetAt.IsZero() {
		t.Errorf("events %+v; want a warning at 6 and a crossing at 11", got)
	}
}

// A webhook that cannot be reached is logged without its URL, which may
// hold a token.
func TestWebhookFailureHidesURL(t *testing.T) {
	var logs bytes.Buffer
	var mu sync.Mutex
	s := mustSet(t, slog.New(slog.NewTextHandler(lockedWriter{&mu, &logs}, nil)), Spec{Tenant: "a", Limit: 1, Period: Day})
	stop := s.Notify("http://127.0.0.1:1/hook?token=s3cret", nil)
	spendUSD(s, "a", 2)
	stop()
	mu.Lock()
	defer mu.Unlock()
	if !strings.Contains(logs.String(), "budget webhook: not delivered") || strings.Contains(logs.String(), "s3cret") || strings.Contains(logs.String(), "127.0.0.1:1") {
		t.Errorf("log:\n%s", logs.String())
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}
