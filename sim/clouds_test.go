package sim_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	anthropic "github.com/anthropics/anthropic-sdk-go"
	sdkbedrock "github.com/anthropics/anthropic-sdk-go/bedrock"
	"github.com/anthropics/anthropic-sdk-go/option"
	sdkvertex "github.com/anthropics/anthropic-sdk-go/vertex"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime"
	brtypes "github.com/aws/aws-sdk-go-v2/service/bedrockruntime/types"
	"github.com/aws/smithy-go"
	"golang.org/x/oauth2"
	"golang.org/x/oauth2/google"

	"github.com/sluicehq/sluice/internal/cloudtest"
	"github.com/sluicehq/sluice/sim"
)

// The simulator's cloud paths, checked with the clients people use
// against the real clouds: the AWS SDK's bedrockruntime client and the
// Anthropic Go SDK's bedrock and vertex options, each pointed at the
// simulator on loopback.

const bedrockModel = "global.anthropic.claude-sonnet-4-5-20250929-v1:0"

const invokeBody = `{"anthropic_version":"bedrock-2023-05-31","max_tokens":64,"messages":[{"role":"user","content":"hello"}]}`

// runtimeClient is the AWS SDK's Bedrock runtime client for the simulator,
// signing with secret; hdr are test headers added after signing. It makes
// one attempt, so that a refusal reaches the test as it was answered.
func runtimeClient(t *testing.T, url, secret string, hdr ...string) *bedrockruntime.Client {
	return bedrockruntime.New(bedrockruntime.Options{
		Region:           "us-east-1",
		BaseEndpoint:     aws.String(url),
		Credentials:      credentials.NewStaticCredentialsProvider(cloudtest.AccessKeyID, secret, ""),
		HTTPClient:       cloudtest.Client(t, hdr...),
		RetryMaxAttempts: 1,
	})
}

func TestBedrockRuntimeInvokeModel(t *testing.T) {
	s := cloudtest.Start(t, cloudtest.Config())
	c := runtimeClient(t, s.URL, cloudtest.SecretAccessKey)
	ctx := context.Background()

	out, err := c.InvokeModel(ctx, &bedrockruntime.InvokeModelInput{ModelId: aws.String(bedrockModel), Body: []byte(invokeBody), ContentType: aws.String("application/json")})
	if err != nil {
		t.Fatalf("InvokeModel: %v", err)
	}
	var msg anthropic.Message
	if err := json.Unmarshal(out.Body, &msg); err != nil {
		t.Fatalf("body %s: %v", out.Body, err)
	}
	if msg.Type != "message" || msg.Model != "claude-sonnet-4-5-20250929" || len(msg.Content) == 0 || msg.Content[0].Text == "" || msg.StopReason != "end_turn" {
		t.Errorf("reply %s; want a message from claude-sonnet-4-5-20250929 with text, ending end_turn", out.Body)
	}
	if got := s.Last(t).Path; got != "/model/global.anthropic.claude-sonnet-4-5-20250929-v1%3A0/invoke" {
		t.Errorf("path %q; want the SDK's escaped model id", got)
	}

	st, err := c.InvokeModelWithResponseStream(ctx, &bedrockruntime.InvokeModelWithResponseStreamInput{ModelId: aws.String(bedrockModel), Body: []byte(invokeBody), ContentType: aws.String("application/json")})
	if err != nil {
		t.Fatalf("InvokeModelWithResponseStream: %v", err)
	}
	var acc anthropic.Message
	var types []string
	for ev := range st.GetStream().Events() {
		chunk, ok := ev.(*brtypes.ResponseStreamMemberChunk)
		if !ok {
			t.Fatalf("event %T; want chunks", ev)
		}
		var e anthropic.MessageStreamEventUnion
		if err := json.Unmarshal(chunk.Value.Bytes, &e); err != nil {
			t.Fatalf("chunk %s: %v", chunk.Value.Bytes, err)
		}
		types = append(types, e.Type)
		if err := acc.Accumulate(e); err != nil {
			t.Fatalf("Accumulate: %v", err)
		}
	}
	if err := st.GetStream().Err(); err != nil {
		t.Fatalf("stream: %v", err)
	}
	st.GetStream().Close()
	if types[0] != "message_start" || types[len(types)-1] != "message_stop" {
		t.Errorf("event types %v; want message_start … message_stop", types)
	}
	if acc.Content[0].Text != msg.Content[0].Text || acc.Usage.OutputTokens != msg.Usage.OutputTokens {
		t.Errorf("streamed %q (%d tokens); want the invoked %q (%d)", acc.Content[0].Text, acc.Usage.OutputTokens, msg.Content[0].Text, msg.Usage.OutputTokens)
	}

	ct, err := c.CountTokens(ctx, &bedrockruntime.CountTokensInput{ModelId: aws.String(bedrockModel),
		Input: &brtypes.CountTokensInputMemberInvokeModel{Value: brtypes.InvokeModelTokensRequest{Body: []byte(invokeBody)}}})
	if err != nil {
		t.Fatalf("CountTokens: %v", err)
	}
	if ct.InputTokens == nil || int64(*ct.InputTokens) != msg.Usage.InputTokens {
		t.Errorf("CountTokens = %v; want the reply's input tokens %d", ct.InputTokens, msg.Usage.InputTokens)
	}

	stats := s.Stats()
	if b := stats.Backends["bedrock"]; b.Requests != 3 || b.ByStatus["200"] != 3 {
		t.Errorf("stats backends %+v; want 3 bedrock requests answered 200", stats.Backends)
	}
	for k := range stats.Credentials {
		if !strings.HasPrefix(k, "sigv4 ") || len(stats.Credentials) != 1 {
			t.Errorf("credentials %v; want one sigv4 key counted (not a signature a request)", stats.Credentials)
		}
	}
}

// apiCode is the AWS error code of err, and its HTTP status.
func apiCode(t *testing.T, err error) string {
	t.Helper()
	var ae smithy.APIError
	if !errors.As(err, &ae) {
		t.Fatalf("error %v (%T); want an AWS API error", err, err)
	}
	return ae.ErrorCode()
}

func TestBedrockRuntimeErrors(t *testing.T) {
	s := cloudtest.Start(t, cloudtest.Config())
	ctx := context.Background()
	invoke := func(c *bedrockruntime.Client, body string) error {
		_, err := c.InvokeModel(ctx, &bedrockruntime.InvokeModelInput{ModelId: aws.String(bedrockModel), Body: []byte(body)})
		return err
	}

	var throttled *brtypes.ThrottlingException
	if err := invoke(runtimeClient(t, s.URL, cloudtest.SecretAccessKey, "x-sim-fault", "429"), invokeBody); !errors.As(err, &throttled) {
		t.Errorf("429 fault: %v; want a ThrottlingException", err)
	}
	var unavailable *brtypes.ServiceUnavailableException
	if err := invoke(runtimeClient(t, s.URL, cloudtest.SecretAccessKey, "x-sim-fault", "529"), invokeBody); !errors.As(err, &unavailable) {
		t.Errorf("529 fault: %v; want a ServiceUnavailableException", err)
	}
	var invalid *brtypes.ValidationException
	if err := invoke(runtimeClient(t, s.URL, cloudtest.SecretAccessKey), `{"anthropic_version":"bedrock-2023-05-31","model":"x","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`); !errors.As(err, &invalid) || !strings.Contains(invalid.ErrorMessage(), "extraneous key [model]") {
		t.Errorf("a body with model: %v; want a ValidationException naming the key", err)
	}
	var internal *brtypes.InternalServerException
	if err := invoke(runtimeClient(t, s.URL, cloudtest.SecretAccessKey, "x-sim-fault", "500"), invokeBody); !errors.As(err, &internal) {
		t.Errorf("500 fault: %v; want an InternalServerException", err)
	}
	_, err := runtimeClient(t, s.URL, cloudtest.SecretAccessKey, "x-sim-fault", "429").InvokeModelWithResponseStream(ctx,
		&bedrockruntime.InvokeModelWithResponseStreamInput{ModelId: aws.String(bedrockModel), Body: []byte(invokeBody)})
	if !errors.As(err, &throttled) {
		t.Errorf("429 fault on a stream: %v; want a ThrottlingException before any event", err)
	}
	var denied *brtypes.AccessDeniedException
	if err := invoke(runtimeClient(t, s.URL, cloudtest.SecretAccessKey, "x-sim-fault", "403"), invokeBody); !errors.As(err, &denied) {
		t.Errorf("403 fault: %v; want an AccessDeniedException", err)
	}
	if err := invoke(runtimeClient(t, s.URL, "not-the-secret"), invokeBody); err == nil || apiCode(t, err) != "InvalidSignatureException" {
		t.Errorf("wrong secret: %v; want InvalidSignatureException", err)
	}

	// A fault after the stream began arrives as the stream's exception.
	c := runtimeClient(t, s.URL, cloudtest.SecretAccessKey, "x-sim-fault", "midstream-error")
	st, err := c.InvokeModelWithResponseStream(ctx, &bedrockruntime.InvokeModelWithResponseStreamInput{ModelId: aws.String(bedrockModel), Body: []byte(invokeBody)})
	if err != nil {
		t.Fatalf("InvokeModelWithResponseStream: %v", err)
	}
	n := 0
	for range st.GetStream().Events() {
		n++
	}
	st.GetStream().Close()
	if err := st.GetStream().Err(); !errors.As(err, &unavailable) || n == 0 {
		t.Errorf("midstream error after %d events: %v; want chunks, then a ServiceUnavailableException", n, err)
	}
	if got := s.Stats().Backends["bedrock"].ByStatus; got["429"] != 2 || got["503"] != 1 || got["400"] != 1 || got["403"] != 2 || got["500"] != 1 {
		t.Errorf("bedrock statuses %v; want two 429, one 503, one 400, two 403 and one 500", got)
	}
}

func sdkParams() anthropic.MessageNewParams {
	return anthropic.MessageNewParams{
		Model:     anthropic.Model(bedrockModel),
		MaxTokens: 64,
		Messages:  []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hello"))},
	}
}

func TestAnthropicSDKBedrock(t *testing.T) {
	t.Setenv("AWS_BEARER_TOKEN_BEDROCK", "")
	s := cloudtest.Start(t, cloudtest.Config())
	ctx := context.Background()
	client := func(secret string, hdr ...string) *anthropic.Client {
		cfg := aws.Config{Region: "us-east-1", Credentials: credentials.NewStaticCredentialsProvider(cloudtest.AccessKeyID, secret, "")}
		c := anthropic.NewClient(sdkbedrock.WithConfig(cfg), option.WithBaseURL(s.URL), option.WithHTTPClient(cloudtest.Client(t, hdr...)), option.WithMaxRetries(0))
		return &c
	}
	c := client(cloudtest.SecretAccessKey)
	p := sdkParams()
	msg, err := c.Messages.New(ctx, p, option.WithHeader("anthropic-beta", "context-1m-2025-08-07"))
	if err != nil {
		t.Fatalf("Messages.New: %v", err)
	}
	if len(msg.Content) == 0 || msg.Content[0].Text == "" {
		t.Fatalf("reply %+v; want text", msg)
	}
	var sent map[string]any
	_ = json.Unmarshal(s.Last(t).Body, &sent)
	if betas, _ := sent["anthropic_beta"].([]any); len(betas) != 1 || betas[0] != "context-1m-2025-08-07" {
		t.Errorf("anthropic_beta %v; want the header's beta in the body", sent["anthropic_beta"])
	}

	acc := sim.CollectV1(t, c.Messages.NewStreaming(ctx, p))
	if acc.Content[0].Text != msg.Content[0].Text {
		t.Errorf("streamed %q; want %q", acc.Content[0].Text, msg.Content[0].Text)
	}

	var apiErr *anthropic.Error
	for _, c := range []struct {
		fault  string
		status int
	}{{"429", 429}, {"529", 503}} {
		_, err := client(cloudtest.SecretAccessKey, "x-sim-fault", c.fault).Messages.New(ctx, p)
		if !errors.As(err, &apiErr) || apiErr.StatusCode != c.status {
			t.Errorf("fault %s: %v; want an API error with status %d", c.fault, err, c.status)
		}
	}
	if _, err := client("not-the-secret").Messages.New(ctx, p); !errors.As(err, &apiErr) || apiErr.StatusCode != 403 {
		t.Errorf("wrong secret: %v; want a 403", err)
	}
	stream := client(cloudtest.SecretAccessKey, "x-sim-fault", "midstream-error").Messages.NewStreaming(ctx, p)
	n := 0
	for stream.Next() {
		n++
	}
	stream.Close()
	if err := stream.Err(); err == nil || n == 0 || !strings.Contains(err.Error(), "serviceUnavailableException") {
		t.Errorf("midstream error after %d events: %v; want events, then the exception as the stream's error", n, err)
	}
}

func TestAnthropicSDKVertex(t *testing.T) {
	s := cloudtest.Start(t, cloudtest.Config())
	ctx := context.Background()
	client := func(token string, hdr ...string) *anthropic.Client {
		creds := &google.Credentials{TokenSource: oauth2.StaticTokenSource(&oauth2.Token{AccessToken: token})}
		c := anthropic.NewClient(option.WithHTTPClient(cloudtest.Client(t, hdr...)), sdkvertex.WithCredentials(ctx, "us-east5", "sim-project", creds),
			option.WithBaseURL(s.URL), option.WithMaxRetries(0))
		return &c
	}
	c := client(cloudtest.VertexToken)
	p := sdkParams()
	p.Model = "claude-sonnet-4-5@20250929"
	msg, err := c.Messages.New(ctx, p)
	if err != nil {
		t.Fatalf("Messages.New: %v", err)
	}
	if msg.Model != "claude-sonnet-4-5-20250929" || len(msg.Content) == 0 || msg.Content[0].Text == "" {
		t.Fatalf("reply %+v; want text from claude-sonnet-4-5-20250929", msg)
	}
	if got := s.Last(t).Path; got != "/v1/projects/sim-project/locations/us-east5/publishers/anthropic/models/claude-sonnet-4-5@20250929:rawPredict" {
		t.Errorf("path %q; want rawPredict of the model", got)
	}

	acc := sim.CollectV1(t, c.Messages.NewStreaming(ctx, p))
	if acc.Content[0].Text != msg.Content[0].Text {
		t.Errorf("streamed %q; want %q", acc.Content[0].Text, msg.Content[0].Text)
	}

	n, err := c.Messages.CountTokens(ctx, anthropic.MessageCountTokensParams{Model: p.Model, Messages: p.Messages})
	if err != nil {
		t.Fatalf("CountTokens: %v", err)
	}
	if n.InputTokens != msg.Usage.InputTokens {
		t.Errorf("count %d; want the reply's %d input tokens", n.InputTokens, msg.Usage.InputTokens)
	}

	var apiErr *anthropic.Error
	for _, c := range []struct {
		fault  string
		status int
		code   string
	}{{"429", 429, "RESOURCE_EXHAUSTED"}, {"529", 503, "UNAVAILABLE"}} {
		_, err := client(cloudtest.VertexToken, "x-sim-fault", c.fault).Messages.New(ctx, p)
		if !errors.As(err, &apiErr) || apiErr.StatusCode != c.status || !strings.Contains(apiErr.RawJSON(), c.code) {
			t.Errorf("fault %s: %v; want status %d with %s", c.fault, err, c.status, c.code)
		}
	}
	if _, err := client("not-the-token").Messages.New(ctx, p); !errors.As(err, &apiErr) || apiErr.StatusCode != 401 || !strings.Contains(apiErr.RawJSON(), "UNAUTHENTICATED") {
		t.Errorf("wrong token: %v; want a 401 UNAUTHENTICATED", err)
	}
	stream := client(cloudtest.VertexToken, "x-sim-fault", "midstream-error").Messages.NewStreaming(ctx, p)
	events := 0
	for stream.Next() {
		events++
	}
	stream.Close()
	if err := stream.Err(); !errors.As(err, &apiErr) || events == 0 || !strings.Contains(err.Error(), "overloaded_error") {
		t.Errorf("midstream error after %d events: %v; want events, then the API's overloaded_error", events, err)
	}
	// The cut stream is counted when its handler returns, which may be
	// just after its client has read the error and gone.
	got := s.Stats().Backends["vertex"]
	for deadline := time.Now().Add(5 * time.Second); got.Requests < 7 && time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		got = s.Stats().Backends["vertex"]
	}
	if got.Requests != 7 || got.ByStatus["200"] != 4 {
		t.Errorf("vertex stats %+v; want 7 requests, 4 answered 200", got)
	}
}
