package sim

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

const helloBody = `{"model":"claude-sonnet-4-5","max_tokens":256,"messages":[{"role":"user","content":"hello"}]}`

// call runs one request through the handler in memory, which also works
// inside a synctest bubble. hdr is name, value pairs.
func call(s *Server, method, path, body string, hdr ...string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, path, strings.NewReader(body))
	r.Header.Set("x-api-key", "sk-test")
	r.Header.Set("anthropic-version", "2023-06-01")
	r.Header.Set("content-type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		if hdr[i+1] == "" {
			r.Header.Del(hdr[i])
			continue
		}
		r.Header.Set(hdr[i], hdr[i+1])
	}
	w := httptest.NewRecorder()
	s.ServeHTTP(w, r)
	return w
}

// decoded is the part of a reply or error the tests look at.
type decoded struct {
	Type       string `json:"type"`
	StopReason string `json:"stop_reason"`
	Content    []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	} `json:"content"`
	Usage struct {
		InputTokens   int `json:"input_tokens"`
		CacheCreation int `json:"cache_creation_input_tokens"`
		CacheRead     int `json:"cache_read_input_tokens"`
		Output        int `json:"output_tokens"`
		Split         struct {
			M5 int `json:"ephemeral_5m_input_tokens"`
			H1 int `json:"ephemeral_1h_input_tokens"`
		} `json:"cache_creation"`
	} `json:"usage"`
	Error struct {
		Type    string `json:"type"`
		Message string `json:"message"`
	} `json:"error"`
	RequestID string `json:"request_id"`
}

func decode(t *testing.T, w *httptest.ResponseRecorder) decoded {
	t.Helper()
	var d decoded
	if err := json.Unmarshal(w.Body.Bytes(), &d); err != nil {
		t.Fatalf("decode %q: %v", w.Body.String(), err)
	}
	return d
}

func wantError(t *testing.T, w *httptest.ResponseRecorder, status int, typ, msgPart string) {
	t.Helper()
	if w.Code != status {
		t.Fatalf("status = %d; want %d (body %s)", w.Code, status, w.Body)
	}
	d := decode(t, w)
	if d.Type != "error" || d.Error.Type != typ || !strings.Contains(d.Error.Message, msgPart) {
		t.Errorf("error = %+v; want type %q mentioning %q", d, typ, msgPart)
	}
	if !strings.HasPrefix(d.RequestID, "req_") || d.RequestID != w.Header().Get("request-id") {
		t.Errorf("request_id %q, header %q; want the same req_ id", d.RequestID, w.Header().Get("request-id"))
	}
	if w.Header().Get("anthropic-organization-id") == "" {
		t.Errorf("no anthropic-organization-id header")
	}
}

var _ http.Handler = (*Server)(nil)
