package proxy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	sdkv1 "github.com/anthropics/anthropic-sdk-go"
	optv1 "github.com/anthropics/anthropic-sdk-go/option"
	sdkv2 "github.com/anthropics/anthropic-sdk-go/v2"
	optv2 "github.com/anthropics/anthropic-sdk-go/v2/option"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/sim"
	"github.com/sluicehq/sluice/sse"
)

func TestStreamingBody(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`{"model":"m","max_tokens":5}`, `{"model":"m","max_tokens":5,"stream":true}`},
		{"{\"model\":\"m\" }\n", `{"model":"m","stream":true}`},
		{`{}`, `{"stream":true}`},
		{`{"stream":false,"model":"m"}`, `{"model":"m","stream":true}`},
	} {
		got, err := sse.StreamingBody([]byte(tc.in))
		if err != nil || string(got) != tc.want {
			t.Errorf("sse.StreamingBody(%s) = %s, %v; want %s", tc.in, got, err, tc.want)
		}
	}
}

func event(name, data string) string { return "event: " + name + "\ndata: " + data + "\n\n" }

// The events of a stream make the Message the API answers without
// stream: members in the API's order, the texts and the tool input
// whole, the last message_delta's stop reason and usage.
func TestReassemble(t *testing.T) {
	got, err := reassembleAll(strings.Join(sseEvents, ""))
	want := `{"id":"msg_01S","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[{"type":"text","text":"Hello world"}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":25,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":15}}` + "\n"
	if err != nil || got != want {
		t.Errorf("reassembled\n%s(%v); want\n%s", got, err, want)
	}

	stream := event("message_start", `{"type":"message_start","message":{"id":"msg_2","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":9,"output_tokens":1}}}`) +
		event("content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":"","signature":""}}`) +
		event("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"a < b & "}}`) +
		event("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"c"}}`) +
		event("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"sig"}}`) +
		event("content_block_stop", `{"type":"content_block_stop","index":0}`) +
		event("ping", `{"type": "ping"}`) +
		event("content_block_start", `{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_1","name":"get_weather","input":{}}}`) +
		event("content_block_delta", `{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"city\": "}}`) +
		event("content_block_delta", `{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"\"Paris\"}"}}`) +
		event("content_block_stop", `{"type":"content_block_stop","index":1}`) +
		event("content_block_start", `{"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"toolu_2","name":"now","input":{}}}`) +
		event("content_block_stop", `{"type":"content_block_stop","index":2}`) +
		event("message_delta", `{"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":30}}`) +
		event("message_stop", `{"type":"message_stop"}`)
	got, err = reassembleAll(stream)
	want = `{"id":"msg_2","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[` +
		`{"type":"thinking","thinking":"a < b & c","signature":"sig"},` +
		`{"type":"tool_use","id":"toolu_1","name":"get_weather","input":{"city":"Paris"}},` +
		`{"type":"tool_use","id":"toolu_2","name":"now","input":{}}],` +
		`"stop_reason":"tool_use","stop_sequence":null,"usage":{"input_tokens":9,"output_tokens":30}}` + "\n"
	if err != nil || got != want {
		t.Errorf("reassembled\n%s(%v); want\n%s", got, err, want)
	}
}

func reassembleAll(events string) (string, error) {
	status, body, err := sse.Reassemble([]byte(events), "req_1")
	if err == nil && status != http.StatusOK {
		err = fmt.Errorf("status %d", status)
	}
	return string(body), err
}

// An error event is the error the API answers a non-streaming request
// with; a stream cut short is no answer at all.
func TestReassembleFailures(t *testing.T) {
	start := sseEvents[0] + sseEvents[1]
	status, body, err := sse.Reassemble([]byte(start+event("error", `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`)), "req_9")
	want := `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"},"request_id":"req_9"}` + "\n"
	if err != nil || status != 529 || string(body) != want {
		t.Errorf("error event: %d %s (%v); want 529 %s", status, body, err, want)
	}
	if _, _, err := sse.Reassemble([]byte(start), "req_9"); !errors.Is(err, sse.ErrStreamIncomplete) {
		t.Errorf("cut stream: %v; want sse.ErrStreamIncomplete", err)
	}
}

// handlerTransport serves requests with a handler in memory, inside a
// synctest bubble.
type handlerTransport struct{ h http.Handler }

func (ht handlerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	rec := httptest.NewRecorder()
	ht.h.ServeHTTP(rec, r)
	return rec.Result(), nil
}

// sharedParams are non-streaming parameters on sharedSystem, marked for
// caching.
func sharedParamsV2(i int) sdkv2.MessageNewParams {
	return sdkv2.MessageNewParams{
		Model: "claude-sonnet-4-5", MaxTokens: 64,
		System:   []sdkv2.TextBlockParam{{Text: sharedSystem, CacheControl: sdkv2.NewCacheControlEphemeralParam()}},
		Messages: []sdkv2.MessageParam{sdkv2.NewUserMessage(sdkv2.NewTextBlock(fmt.Sprintf("question %d", i)))},
	}
}

func sharedParamsV1(i int) sdkv1.MessageNewParams {
	return sdkv1.MessageNewParams{
		Model: "claude-sonnet-4-5", MaxTokens: 64,
		System:   []sdkv1.TextBlockParam{{Text: sharedSystem, CacheControl: sdkv1.NewCacheControlEphemeralParam()}},
		Messages: []sdkv1.MessageParam{sdkv1.NewUserMessage(sdkv1.NewTextBlock(fmt.Sprintf("question %d", i)))},
	}
}

// sameMessage reports whether two Messages' JSON are equal but for their
// ids.
func sameMessage(t *testing.T, a, b string) bool {
	t.Helper()
	var ma, mb map[string]any
	if err := json.Unmarshal([]byte(a), &ma); err != nil {
		t.Fatalf("%s: %v", a, err)
	}
	if err := json.Unmarshal([]byte(b), &mb); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	delete(ma, "id")
	delete(mb, "id")
	return reflect.DeepEqual(ma, mb)
}

// Non-streaming requests on one cached prefix, through both official Go
// SDKs: the leader is sent upstream as a stream, so its followers are held
// only for its time to first token (400 ms), not its whole answer; the
// usage each client sees is one write and N−1 reads; and the leader's
// reassembled Message is, but for its id, the one the simulator answers
// the same request without stream.
func TestNonStreamingLeaderThroughSDKs(t *testing.T) {
	const n = 5
	type call struct {
		raw         string
		write, read int64
	}
	for _, sdk := range []string{"v1", "v2"} {
		t.Run(sdk, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				cfg := sim.Config{TTFT: 400 * time.Millisecond, PerToken: 10 * time.Millisecond}
				s := sim.New(cfg)
				t.Cleanup(s.Close)
				rig := newBubbleRig(t, true, s.ServeHTTP, func(c *config.Config) { c.MaxConcurrency = n })
				var log strings.Builder
				rig.proxy.log = slog.New(slog.NewTextHandler(&syncWriter{w: &log}, nil))
				fresh := sim.New(cfg) // answers the leader's request without stream, for comparison
				t.Cleanup(fresh.Close)
				direct := &http.Client{Transport: handlerTransport{fresh}}

				newCall := func(hc *http.Client, base string, i int) call {
					var c call
					if sdk == "v1" {
						client := sdkv1.NewClient(optv1.WithAPIKey("sk-test"), optv1.WithBaseURL(base), optv1.WithHTTPClient(hc), optv1.WithMaxRetries(0))
						msg, err := client.Messages.New(context.Background(), sharedParamsV1(i))
						if err != nil {
							t.Error(err)
							return c
						}
						return call{msg.RawJSON(), msg.Usage.CacheCreationInputTokens, msg.Usage.CacheReadInputTokens}
					}
					client := sdkv2.NewClient(optv2.WithAPIKey("sk-test"), optv2.WithBaseURL(base), optv2.WithHTTPClient(hc), optv2.WithMaxRetries(0))
					msg, err := client.Messages.New(context.Background(), sharedParamsV2(i))
					if err != nil {
						t.Error(err)
						return c
					}
					return call{msg.RawJSON(), msg.Usage.CacheCreationInputTokens, msg.Usage.CacheReadInputTokens}
				}
				calls := make([]call, n)
				var wg sync.WaitGroup
				for i := range calls {
					wg.Go(func() { calls[i] = newCall(rig.client, rig.url, i) })
				}
				wg.Wait()
				writes, reads, leader := 0, 0, -1
				for i, c := range calls {
					switch {
					case c.write > 0 && c.read == 0:
						writes, leader = writes+1, i
					case c.read > 0 && c.write == 0:
						reads++
					}
				}
				if writes != 1 || reads != n-1 {
					t.Fatalf("%d cache writes and %d reads seen by the SDK; want 1 and %d", writes, reads, n-1)
				}
				synctest.Wait() // each access line is written just after its answer (see deliver)
				if got := strings.Count(log.String(), "cache=follower cache_hold_ms=400"); got != n-1 {
					t.Errorf("%d followers held 400 ms, the leader's time to first token; want %d:\n%s", got, n-1, log.String())
				}
				want := newCall(direct, "http://sim.test", leader)
				if !sameMessage(t, calls[leader].raw, want.raw) {
					t.Errorf("reassembled leader's Message\n%s\ndiffers from the non-streaming answer\n%s", calls[leader].raw, want.raw)
				}
			})
		})
	}
}
