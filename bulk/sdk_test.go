package bulk

import (
	"context"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go"
	"github.com/anthropics/anthropic-sdk-go/option"
)

// The official Go SDK, its base URL at sluice, sends a bulk request with
// its ordinary MessageNewParams and reads the result as a Message.
func TestGoSDKAgainstTheBulkEndpoint(t *testing.T) {
	h := newHarness(t, Config{MaxRequests: 1})
	client := anthropic.NewClient(option.WithBaseURL(h.url), option.WithAPIKey(testKey))
	ctx := context.Background()
	type bulkMessage struct {
		ID     string `json:"id"`
		Status string `json:"status"`
		Result struct {
			Type    string            `json:"type"`
			Message anthropic.Message `json:"message"`
		} `json:"result"`
	}
	params := anthropic.MessageNewParams{
		Model:     anthropic.ModelClaudeHaiku4_5,
		MaxTokens: 64,
		Messages:  []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("Classify item 1"))},
	}
	var accepted bulkMessage
	if err := client.Post(ctx, "v1/bulk/messages", params, &accepted, option.WithHeader("Idempotency-Key", "item-1")); err != nil {
		t.Fatal(err)
	}
	var m bulkMessage
	deadline := time.Now().Add(20 * time.Second)
	for m.Status != StatusEnded {
		if time.Now().After(deadline) {
			t.Fatalf("not ended: %+v", m)
		}
		if err := client.Get(ctx, "v1/bulk/messages/"+accepted.ID+"?wait=5s", nil, &m); err != nil {
			t.Fatal(err)
		}
	}
	if m.Result.Type != "succeeded" || m.Result.Message.Usage.OutputTokens == 0 || len(m.Result.Message.Content) == 0 {
		t.Errorf("result through the SDK: %+v", m.Result)
	}
}
