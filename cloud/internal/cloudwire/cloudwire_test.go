package cloudwire

import (
	"net/http"
	"net/http/httptest"
	"reflect"
	"testing"
)

func TestParseMessagesKeepsEveryOtherMemberAsSent(t *testing.T) {
	body := `{"model":"claude-sonnet-4-5","stream":true,"max_tokens":5,"system":[{"type":"text","text":"s","cache_control":{"type":"ephemeral","ttl":"1h"}}],"future_field":{"a":[1,2]}}`
	r, aerr := ParseMessages([]byte(body))
	if aerr != nil || r.Model != "claude-sonnet-4-5" || !r.Stream {
		t.Fatalf("ParseMessages = %+v, %v", r, aerr)
	}
	delete(r.Fields, "model")
	r.Set("anthropic_version", "v")
	out, err := r.Body()
	want := `{"anthropic_version":"v","future_field":{"a":[1,2]},"max_tokens":5,"stream":true,"system":[{"type":"text","text":"s","cache_control":{"type":"ephemeral","ttl":"1h"}}]}`
	if err != nil || string(out) != want {
		t.Errorf("Body = %s, %v; want %s", out, err, want)
	}
	for _, bad := range []string{`[]`, `null`, `{"model":5}`, `{"max_tokens":1}`, `not json`} {
		if _, aerr := ParseMessages([]byte(bad)); aerr == nil || aerr.Status != 400 {
			t.Errorf("ParseMessages(%s) = %v; want a 400", bad, aerr)
		}
	}
}

func TestBetas(t *testing.T) {
	h := http.Header{}
	h.Add("anthropic-beta", "a-1, b-2,")
	h.Add("anthropic-beta", " c-3")
	if got := Betas(h); !reflect.DeepEqual(got, []string{"a-1", "b-2", "c-3"}) {
		t.Errorf("Betas = %q", got)
	}
	if got := Betas(http.Header{}); got != nil {
		t.Errorf("Betas of none = %q; want nil", got)
	}
}

func TestModelsOverlay(t *testing.T) {
	got := Models(map[string]string{"a": "1", "b": "2"}, map[string]string{"b": "", "c": "3", "a": "9"})
	if !reflect.DeepEqual(got, map[string]string{"a": "9", "c": "3"}) {
		t.Errorf("Models = %v; want a replaced, b removed, c added", got)
	}
}

func TestRouteOf(t *testing.T) {
	for _, c := range []struct {
		method, path string
		want         Route
	}{
		{"POST", "/v1/messages", RouteCreate},
		{"POST", "/v1/messages/count_tokens", RouteCount},
		{"POST", "/v1/messages/batches", RouteBatch},
		{"GET", "/v1/messages/batches/msgbatch_1/results", RouteBatch},
		{"GET", "/v1/messages", RouteOther},
		{"GET", "/v1/models", RouteOther},
	} {
		if got := RouteOf(httptest.NewRequest(c.method, c.path, nil)); got != c.want {
			t.Errorf("RouteOf(%s %s) = %d; want %d", c.method, c.path, got, c.want)
		}
	}
}
