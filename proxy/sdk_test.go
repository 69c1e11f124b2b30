package proxy

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"testing"

	sdkv1 "github.com/anthropics/anthropic-sdk-go"
	optv1 "github.com/anthropics/anthropic-sdk-go/option"
	sdkv2 "github.com/anthropics/anthropic-sdk-go/v2"
	optv2 "github.com/anthropics/anthropic-sdk-go/v2/option"
)

// sdkUpstream answers like the API, and with a 429 for the model
// "rate-limited" so that SDK error reporting can be checked.
func sdkUpstream(t *testing.T) string {
	up := startUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var req struct {
			Model  string `json:"model"`
			Stream bool   `json:"stream"`
		}
		json.Unmarshal(body, &req)
		switch {
		case req.Model == "rate-limited":
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("X-Should-Retry", "false")
			w.WriteHeader(429)
			io.WriteString(w, `{"type":"error","error":{"type":"rate_limit_error","message":"slow down"},"request_id":"req_429"}`)
		case req.Stream:
			writeStream(w)
		default:
			writeMessage(w)
		}
	})
	return up.URL
}

func TestOfficialSDKv2ThroughSluice(t *testing.T) {
	bothModes(t, func(t *testing.T, windowed bool) {
		_, px := startProxy(t, testConfig(t, sdkUpstream(t), windowed))
		client := sdkv2.NewClient(optv2.WithAPIKey("sk-test"), optv2.WithBaseURL(px.URL), optv2.WithMaxRetries(0))
		ctx := context.Background()
		params := sdkv2.MessageNewParams{
			Model: "claude-sonnet-4-5", MaxTokens: 64,
			Messages: []sdkv2.MessageParam{sdkv2.NewUserMessage(sdkv2.NewTextBlock("hi"))},
		}

		msg, err := client.Messages.New(ctx, params)
		if err != nil {
			t.Fatal(err)
		}
		if msg.ID != "msg_01XYZ" || msg.Content[0].Text != "Hello  from upstream" || msg.Usage.OutputTokens != 4 {
			t.Fatalf("message = %+v", msg)
		}

		stream := client.Messages.NewStreaming(ctx, params)
		var acc sdkv2.Message
		for stream.Next() {
			if err := acc.Accumulate(stream.Current()); err != nil {
				t.Fatal(err)
			}
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		if acc.ID != "msg_01S" || len(acc.Content) != 1 || acc.Content[0].Text != "Hello world" ||
			acc.StopReason != "end_turn" || acc.Usage.OutputTokens != 15 || acc.Usage.InputTokens != 25 {
			t.Fatalf("accumulated = %+v", acc)
		}

		params.Model = "rate-limited"
		_, err = client.Messages.New(ctx, params)
		var apiErr *sdkv2.Error
		if !errors.As(err, &apiErr) || apiErr.StatusCode != 429 || apiErr.Type() != "rate_limit_error" {
			t.Fatalf("err = %v; want the upstream's 429 rate_limit_error", err)
		}
	})
}

func TestOfficialSDKv1ThroughSluice(t *testing.T) {
	bothModes(t, func(t *testing.T, windowed bool) {
		_, px := startProxy(t, testConfig(t, sdkUpstream(t), windowed))
		client := sdkv1.NewClient(optv1.WithAPIKey("sk-test"), optv1.WithBaseURL(px.URL), optv1.WithMaxRetries(0))
		ctx := context.Background()
		params := sdkv1.MessageNewParams{
			Model: "claude-sonnet-4-5", MaxTokens: 64,
			Messages: []sdkv1.MessageParam{sdkv1.NewUserMessage(sdkv1.NewTextBlock("hi"))},
		}

		msg, err := client.Messages.New(ctx, params)
		if err != nil {
			t.Fatal(err)
		}
		if msg.ID != "msg_01XYZ" || msg.Content[0].Text != "Hello  from upstream" {
			t.Fatalf("message = %+v", msg)
		}

		stream := client.Messages.NewStreaming(ctx, params)
		var acc sdkv1.Message
		for stream.Next() {
			if err := acc.Accumulate(stream.Current()); err != nil {
				t.Fatal(err)
			}
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		if acc.ID != "msg_01S" || acc.Content[0].Text != "Hello world" || acc.StopReason != "end_turn" || acc.Usage.OutputTokens != 15 {
			t.Fatalf("accumulated = %+v", acc)
		}

		params.Model = "rate-limited"
		_, err = client.Messages.New(ctx, params)
		var apiErr *sdkv1.Error
		if !errors.As(err, &apiErr) || apiErr.StatusCode != 429 || apiErr.Type() != "rate_limit_error" {
			t.Fatalf("err = %v; want the upstream's 429 rate_limit_error", err)
		}
	})
}
