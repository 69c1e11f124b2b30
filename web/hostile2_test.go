package web

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// POST /ui/api/run starts a bench run on the server. It took a body with
// no Content-Type at all, which is what a cross-site fetch with mode
// no-cors and a Blob body sends, with no CORS preflight: any web page the
// operator opened could start runs on a loopback sluice, one after
// another. The page itself sends application/json, which a cross-site
// request can send only after a preflight that sluice does not grant.
func TestRunRefusesABodyWithoutJSONContentType(t *testing.T) {
	var ran atomic.Bool
	srv := httptest.NewServer(New(Options{Run: func(context.Context, Params) (*Trace, error) {
		ran.Store(true)
		return nil, errors.New("refused bodies are not run")
	}}))
	t.Cleanup(srv.Close)
	for _, ct := range []string{"", "text/plain;charset=UTF-8"} {
		req, _ := http.NewRequest("POST", srv.URL+"/ui/api/run", strings.NewReader(`{"burst":1,"latency_ms":1}`))
		if ct != "" {
			req.Header.Set("Content-Type", ct)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnsupportedMediaType {
			t.Errorf("POST /ui/api/run with Content-Type %q: %d %.120s; want 415", ct, resp.StatusCode, b)
		}
	}
	if ran.Load() {
		t.Error("a body without a JSON Content-Type started a run")
	}
}
