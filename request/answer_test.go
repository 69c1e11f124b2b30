package request

import (
	"encoding/json"
	"testing"
)

// TestParseAnswer holds ParseAnswer to what encoding/json reads into the
// struct the proxy used to decode an answer into.
func TestParseAnswer(t *testing.T) {
	for _, b := range []string{
		`{"id":"msg_1","type":"message","model":"claude-sonnet-4-5","content":[{"type":"text","text":"hi \"there\" {"}],"usage":{"input_tokens":12,"output_tokens":10,"cache_creation_input_tokens":3,"cache_read_input_tokens":4000}}`,
		`{"usage":{"input_tokens":1},"model":"m","usage":{"output_tokens":2}}`, // the last usage wins, the first's fields stay
		`{"model":null,"usage":null}`,
		`{"model":"a\u00e9b","usage":{"input_tokens":null,"output_tokens":-5,"other":{"input_tokens":9}}}`,
		` {"content":[[[{}]]],"model":"m"} `,
		`{"model":3}`,
		`{"usage":[]}`,
		`{"usage":{"input_tokens":1.5}}`,
		`{"usage":{"input_tokens":1e3}}`,
		`{"usage":{"input_tokens":"7"}}`,
		`{"usage":{"input_tokens":99999999999999999999}}`,
		`{"usage":{"input_tokens":9223372036854775807,"output_tokens":-9223372036854775808}}`,
		`{"model":"m"`,
		`{"model":"m"} x`,
		`[]`,
		``,
		`null`,
	} {
		var want struct {
			Model string `json:"model"`
			Usage struct {
				Input      int64 `json:"input_tokens"`
				Output     int64 `json:"output_tokens"`
				CacheWrite int64 `json:"cache_creation_input_tokens"`
				CacheRead  int64 `json:"cache_read_input_tokens"`
			} `json:"usage"`
		}
		err := json.Unmarshal([]byte(b), &want)
		if b == `null` {
			err = errNotObject // encoding/json takes null for an empty answer; there is nothing to count
		}
		model, u, ok := ParseAnswer([]byte(b))
		if ok != (err == nil) {
			t.Errorf("%s: ok %v, encoding/json's error %v", b, ok, err)
			continue
		}
		wu := Usage{Input: want.Usage.Input, Output: want.Usage.Output, CacheWrite: want.Usage.CacheWrite, CacheRead: want.Usage.CacheRead}
		u.CacheWrite1h = 0 // the split, read apart (TestParseAnswerCacheSplit)
		if ok && (model != want.Model || u != wu) {
			t.Errorf("%s: %q %+v, encoding/json %q %+v", b, model, u, want.Model, wu)
		}
	}
}

// TestParseAnswerCacheSplit: the 1-hour part of the cache writes is read
// from usage.cache_creation, which prices it apart; a cache_creation that
// is not an object is left alone.
func TestParseAnswerCacheSplit(t *testing.T) {
	for _, c := range []struct {
		b    string
		want Usage
	}{
		{`{"usage":{"input_tokens":3,"cache_creation_input_tokens":500,"cache_creation":{"ephemeral_5m_input_tokens":200,"ephemeral_1h_input_tokens":300},"output_tokens":9}}`,
			Usage{Input: 3, Output: 9, CacheWrite: 500, CacheWrite1h: 300}},
		{`{"usage":{"cache_creation":{"ephemeral_1h_input_tokens":null},"cache_creation_input_tokens":7}}`, Usage{CacheWrite: 7}},
		{`{"usage":{"cache_creation":"x","cache_creation_input_tokens":7}}`, Usage{CacheWrite: 7}},
		{`{"usage":{"cache_creation":{"x":{"ephemeral_1h_input_tokens":5}},"cache_creation_input_tokens":7}}`, Usage{CacheWrite: 7}},
	} {
		_, u, ok := ParseAnswer([]byte(c.b))
		if !ok || u != c.want {
			t.Errorf("%s: %+v %v, want %+v", c.b, u, ok, c.want)
		}
	}
}

var errNotObject = json.Unmarshal([]byte(`1`), new(struct{}))

func BenchmarkParseAnswer(b *testing.B) {
	body := []byte(`{"id":"msg_1","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[{"type":"text","text":"Hello! How can I help you today?"}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":12,"output_tokens":10}}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, _, ok := ParseAnswer(body); !ok {
			b.Fatal("not read")
		}
	}
}

func TestMemberOf(t *testing.T) {
	for _, c := range []struct {
		b, want string
		ok      bool
	}{
		{`{"type":"message_start","message":{"model":"m"}}`, `{"model":"m"}`, true},
		{` {"message":1,"message":[2]} `, `[2]`, true},
		{`{"messages":1,"x":{"message":2}}`, ``, true},
		{`{"message":1`, ``, false},
		{`[]`, ``, false},
	} {
		got, ok := MemberOf([]byte(c.b), "message")
		if string(got) != c.want || ok != c.ok {
			t.Errorf("MemberOf(%s) = %s, %v; want %s, %v", c.b, got, ok, c.want, c.ok)
		}
	}
}
