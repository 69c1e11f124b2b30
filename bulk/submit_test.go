package bulk

import (
	"encoding/json"
	"testing"
)

// The upstream's refusal of a whole batch becomes each request's errored
// result: its own error when it sent one in the Anthropic shape, else an
// api_error naming the status.
func TestErroredFrom(t *testing.T) {
	for _, tc := range []struct {
		body      string
		typ, text string
	}{
		{`{"type":"error","error":{"type":"invalid_request_error","message":"requests: too many"},"request_id":"req_1"}`, "invalid_request_error", "requests: too many"},
		{`<html>502 Bad Gateway</html>`, "api_error", "the upstream refused the batch with status 400"},
		{`{"error":{"type":"server_error","message":"not Anthropic's"}}`, "api_error", "the upstream refused the batch with status 400"},
	} {
		var r struct {
			Type  string `json:"type"`
			Error struct {
				Type  string `json:"type"`
				Error struct{ Type, Message string }
			}
		}
		got := erroredFrom(&apiStatusError{status: 400, body: []byte(tc.body)})
		if err := json.Unmarshal(got, &r); err != nil {
			t.Fatalf("%s: result %s is not JSON: %v", tc.body, got, err)
		}
		if r.Type != "errored" || r.Error.Type != "error" || r.Error.Error.Type != tc.typ || r.Error.Error.Message != tc.text {
			t.Errorf("%s: result %s; want errored %s %q", tc.body, got, tc.typ, tc.text)
		}
	}
}
