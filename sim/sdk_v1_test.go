package sim

import (
	"context"
	"encoding/json"
	"errors"
	"net/http/httptest"
	"testing"
	"time"

	anthropic "github.com/anthropics/anthropic-sdk-go"
	"github.com/anthropics/anthropic-sdk-go/option"
	"github.com/anthropics/anthropic-sdk-go/packages/ssestream"
)

// The same flows as sdk_v2_test.go through the v1 SDK, which sends
// x-api-key and anthropic-version 2023-06-01.

func newV1(ts *httptest.Server, opts ...option.RequestOption) anthropic.Client {
	base := []option.RequestOption{option.WithAPIKey("sk-test"), option.WithBaseURL(ts.URL)}
	return anthropic.NewClient(append(base, opts...)...)
}

func v1Params() anthropic.MessageNewParams {
	return anthropic.MessageNewParams{
		Model:     anthropic.ModelClaudeSonnet4_5,
		MaxTokens: 1024,
		Messages:  []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("Say hello to the simulator."))},
	}
}

func weatherToolV1() anthropic.ToolUnionParam {
	return anthropic.ToolUnionParam{OfTool: &anthropic.ToolParam{
		Name: "get_weather",
		InputSchema: anthropic.ToolInputSchemaParam{
			Properties: map[string]any{
				"city":  map[string]any{"type": "string"},
				"unit":  map[string]any{"type": "string", "enum": []string{"celsius", "fahrenheit"}},
				"days":  map[string]any{"type": "integer", "minimum": 1, "maximum": 7},
				"alert": map[string]any{"type": "boolean"},
			},
			Required: []string{"city", "unit", "days"},
		},
	}}
}

func TestSDKv1Messages(t *testing.T) {
	_, ts, log := startSim(t, Config{Seed: 7})
	client := newV1(ts)
	ctx := context.Background()

	msg, err := client.Messages.New(ctx, v1Params())
	if err != nil {
		t.Fatalf("Messages.New: %v", err)
	}
	if got := log.last().Get("x-api-key"); got != "sk-test" {
		t.Errorf("v1 x-api-key = %q; want sk-test", got)
	}
	if got := log.last().Get("anthropic-version"); got != "2023-06-01" {
		t.Errorf("v1 anthropic-version = %q; want 2023-06-01", got)
	}
	if len(msg.Content) != 1 || msg.Content[0].Type != "text" || msg.Content[0].Text == "" {
		t.Fatalf("content = %+v; want one non-empty text block", msg.Content)
	}
	if msg.StopReason != "end_turn" || msg.Usage.OutputTokens < 16 || msg.Usage.InputTokens < 1 {
		t.Errorf("stop_reason %q, usage %+v; want end_turn and counted tokens", msg.StopReason, msg.Usage)
	}

	stream := client.Messages.NewStreaming(ctx, v1Params())
	acc := collectV1(t, stream)
	if acc.Content[0].Text != msg.Content[0].Text {
		t.Errorf("streamed text %q; want the non-streamed %q", acc.Content[0].Text, msg.Content[0].Text)
	}
	if acc.StopReason != msg.StopReason || acc.Usage.OutputTokens != msg.Usage.OutputTokens || acc.Usage.InputTokens != msg.Usage.InputTokens {
		t.Errorf("streamed stop %q usage %+v; want %q %+v", acc.StopReason, acc.Usage, msg.StopReason, msg.Usage)
	}

	// max_tokens truncates.
	p := v1Params()
	p.MaxTokens = 5
	short, err := client.Messages.New(ctx, p)
	if err != nil {
		t.Fatalf("Messages.New short: %v", err)
	}
	if short.StopReason != "max_tokens" || short.Usage.OutputTokens != 5 {
		t.Errorf("short reply stop %q output %d; want max_tokens 5", short.StopReason, short.Usage.OutputTokens)
	}
}

func TestSDKv1ToolUse(t *testing.T) {
	_, ts, _ := startSim(t, Config{Seed: 3})
	client := newV1(ts)
	p := v1Params()
	p.Tools = []anthropic.ToolUnionParam{weatherToolV1()}
	p.ToolChoice = anthropic.ToolChoiceUnionParam{OfAny: &anthropic.ToolChoiceAnyParam{}}

	msg, err := client.Messages.New(context.Background(), p)
	if err != nil {
		t.Fatalf("Messages.New: %v", err)
	}
	if msg.StopReason != "tool_use" {
		t.Fatalf("stop_reason = %q; want tool_use", msg.StopReason)
	}
	last := msg.Content[len(msg.Content)-1]
	if last.Type != "tool_use" || last.Name != "get_weather" {
		t.Fatalf("last block %+v; want a get_weather tool_use", last)
	}
	var in struct {
		City *string `json:"city"`
		Unit *string `json:"unit"`
		Days *int    `json:"days"`
	}
	if err := json.Unmarshal(last.Input, &in); err != nil {
		t.Fatalf("tool input %s: %v", last.Input, err)
	}
	if in.City == nil || in.Unit == nil || in.Days == nil || (*in.Unit != "celsius" && *in.Unit != "fahrenheit") || *in.Days < 1 || *in.Days > 7 {
		t.Errorf("tool input %s does not fit the schema", last.Input)
	}

	stream := client.Messages.NewStreaming(context.Background(), p)
	acc := collectV1(t, stream)
	got := acc.Content[len(acc.Content)-1]
	if string(got.Input) != string(last.Input) || got.ID != last.ID {
		t.Errorf("streamed tool_use %s %s; want %s %s", got.ID, got.Input, last.ID, last.Input)
	}
}

func TestSDKv1CountTokensAndModels(t *testing.T) {
	_, ts, _ := startSim(t, Config{})
	client := newV1(ts)
	ctx := context.Background()
	n, err := client.Messages.CountTokens(ctx, anthropic.MessageCountTokensParams{
		Model:    anthropic.ModelClaudeSonnet4_5,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("Say hello to the simulator."))},
	})
	if err != nil {
		t.Fatalf("CountTokens: %v", err)
	}
	msg, err := client.Messages.New(ctx, v1Params())
	if err != nil {
		t.Fatalf("Messages.New: %v", err)
	}
	if n.InputTokens != msg.Usage.InputTokens {
		t.Errorf("count_tokens = %d; want the %d input tokens Messages reports", n.InputTokens, msg.Usage.InputTokens)
	}
	page, err := client.Models.List(ctx, anthropic.ModelListParams{})
	if err != nil {
		t.Fatalf("Models.List: %v", err)
	}
	if len(page.Data) == 0 || page.Data[0].ID == "" {
		t.Errorf("models page %+v; want models", page.Data)
	}
}

func TestSDKv1Errors(t *testing.T) {
	_, ts, _ := startSim(t, Config{})
	client := newV1(ts, option.WithMaxRetries(0), option.WithHeader("x-sim-fault", "500"))
	_, err := client.Messages.New(context.Background(), v1Params())
	var apiErr *anthropic.Error
	if !errors.As(err, &apiErr) {
		t.Fatalf("err = %v; want *anthropic.Error", err)
	}
	if apiErr.StatusCode != 500 || apiErr.Type() != "api_error" || apiErr.RequestID == "" {
		t.Errorf("got %d %q request-id %q; want 500 api_error with a request id", apiErr.StatusCode, apiErr.Type(), apiErr.RequestID)
	}
}

func TestSDKv1RetriesOverloaded(t *testing.T) {
	s, ts, _ := startSim(t, Config{})
	client := newV1(ts, option.WithHeader("x-sim-fault", "529-once"), option.WithHeader("x-sim-retry-after-ms", "10"))
	msg, err := client.Messages.New(context.Background(), v1Params())
	if err != nil {
		t.Fatalf("Messages.New: %v; want success after one retry", err)
	}
	if msg.StopReason != "end_turn" {
		t.Errorf("stop_reason %q", msg.StopReason)
	}
	st := s.Stats()
	if st.ByStatus["529"] != 1 || st.ByStatus["200"] != 1 {
		t.Errorf("by_status = %v; want one 529 then one 200", st.ByStatus)
	}
}

func TestSDKv1Batch(t *testing.T) {
	_, ts, _ := startSim(t, Config{BatchDuration: 50 * time.Millisecond})
	client := newV1(ts)
	ctx := context.Background()
	params := anthropic.MessageBatchNewParamsRequestParams{
		Model:     anthropic.ModelClaudeSonnet4_5,
		MaxTokens: 100,
		Messages:  []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hi"))},
	}
	bad := params
	bad.MaxTokens = 0 // invalid: becomes an errored result, not a failed create
	b, err := client.Messages.Batches.New(ctx, anthropic.MessageBatchNewParams{Requests: []anthropic.MessageBatchNewParamsRequest{
		{CustomID: "a", Params: params}, {CustomID: "b", Params: bad},
	}})
	if err != nil {
		t.Fatalf("Batches.New: %v", err)
	}
	for b.ProcessingStatus != "ended" {
		time.Sleep(10 * time.Millisecond) // polling a real server; not asserting timing
		if b, err = client.Messages.Batches.Get(ctx, b.ID, anthropic.MessageBatchGetParams{}); err != nil {
			t.Fatalf("Batches.Get: %v", err)
		}
	}
	if b.RequestCounts.Succeeded != 1 || b.RequestCounts.Errored != 1 || b.ResultsURL == "" {
		t.Errorf("ended batch %+v; want 1 succeeded, 1 errored, a results_url", b.RequestCounts)
	}
	stream := client.Messages.Batches.ResultsStreaming(ctx, b.ID, anthropic.MessageBatchResultsParams{})
	got := map[string]string{}
	for stream.Next() {
		r := stream.Current()
		got[r.CustomID] = r.Result.Type
		if r.Result.Type == "succeeded" && r.Result.Message.Content[0].Text == "" {
			t.Errorf("succeeded result without text")
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatalf("results: %v", err)
	}
	if got["a"] != "succeeded" || got["b"] != "errored" {
		t.Errorf("results = %v; want a succeeded, b errored", got)
	}
	del, err := client.Messages.Batches.Delete(ctx, b.ID, anthropic.MessageBatchDeleteParams{})
	if err != nil || del.ID != b.ID {
		t.Errorf("Delete: %v %+v", err, del)
	}
}

// Thinking blocks, JSON and streamed, parse in the v1 SDK and agree.
func TestSDKv1Thinking(t *testing.T) {
	_, ts, _ := startSim(t, Config{Seed: 5})
	client := newV1(ts)
	ctx := context.Background()
	p := v1Params()
	p.MaxTokens = 4096
	p.Thinking = anthropic.ThinkingConfigParamOfEnabled(2048)

	msg, err := client.Messages.New(ctx, p)
	if err != nil {
		t.Fatalf("Messages.New: %v", err)
	}
	if len(msg.Content) < 2 || msg.Content[0].Type != "thinking" {
		t.Fatalf("content %+v; want a thinking block first", msg.Content)
	}
	th := msg.Content[0].AsThinking()
	if th.Thinking == "" || th.Signature == "" {
		t.Errorf("thinking block %+v; want a thought and a signature", th)
	}
	stream := client.Messages.NewStreaming(ctx, p)
	acc := collectV1(t, stream)
	if len(acc.Content) != len(msg.Content) || acc.Content[0].Thinking != th.Thinking || acc.Content[0].Signature != th.Signature {
		t.Errorf("streamed %+v; want %+v", acc.Content, msg.Content)
	}
}

// collectV1 accumulates a stream into the Message it carries.
func collectV1(t *testing.T, stream *ssestream.Stream[anthropic.MessageStreamEventUnion]) anthropic.Message {
	t.Helper()
	var acc anthropic.Message
	for stream.Next() {
		if err := acc.Accumulate(stream.Current()); err != nil {
			t.Fatalf("Accumulate: %v", err)
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatalf("stream: %v", err)
	}
	return acc
}
