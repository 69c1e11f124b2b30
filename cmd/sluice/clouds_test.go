package main

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	anthropic "github.com/anthropics/anthropic-sdk-go"
	"github.com/anthropics/anthropic-sdk-go/option"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/internal/cloudtest"
	"github.com/sluicehq/sluice/proxy"
)

// cloudSluice serves sluice on loopback with backends (built as serve
// builds them, clouds included), windowed or not.
func cloudSluice(t *testing.T, windowed bool, backends ...config.Backend) string {
	t.Helper()
	return cloudSluiceLog(t, windowed, slog.New(slog.DiscardHandler), backends...)
}

// cloudSluiceLog is cloudSluice logging to log.
func cloudSluiceLog(t *testing.T, windowed bool, log *slog.Logger, backends ...config.Backend) string {
	t.Helper()
	cfg := config.Default()
	cfg.Enabled = windowed
	cfg.UpstreamURL, _ = url.Parse("http://127.0.0.1:1") // unused: every call is routed
	cfg.Backends = backends
	return serveParts(t, cfg, log, nil)
}

// serveParts serves sluice for cfg on loopback, its parts built as serve
// builds them, logging to log (nil: nowhere), with sluice keys in (nil:
// none), and returns its URL.
func serveParts(t *testing.T, cfg config.Config, log *slog.Logger, in *proxy.Inbound) string {
	t.Helper()
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	parts, _, closeShared, err := buildParts(cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeShared)
	p, err := proxy.New(cfg, proxy.Options{Logger: log, Parts: *parts, Inbound: in})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(p)
	t.Cleanup(func() { srv.CloseClientConnections(); srv.Close(); p.Close() })
	return srv.URL
}

// TestOfficialSDKThroughSluiceToEachCloud: the official Go SDK speaks the
// Messages API to sluice, routed to a simulated Bedrock and a simulated
// Vertex AI backend, on both paths: a reply, the same streamed, a count;
// the cloud saw its own protocol and none of the client's key.
func TestOfficialSDKThroughSluiceToEachCloud(t *testing.T) {
	s := cloudtest.Start(t, cloudtest.Config())
	sa := cloudtest.DefaultChains(t)
	clouds := map[string]config.Backend{
		"bedrock": {Name: "aws", Kind: "bedrock", Region: "us-east-1", Endpoint: s.URL},
		"vertex":  {Name: "gcp", Kind: "vertex", Region: "us-east5", Project: "sim-project", Endpoint: s.URL, CredentialsFile: sa},
	}
	for kind, b := range clouds {
		for _, windowed := range []bool{false, true} {
			t.Run(kind+map[bool]string{false: "/plain", true: "/windowed"}[windowed], func(t *testing.T) {
				before := len(s.Requests())
				c := anthropic.NewClient(option.WithAPIKey("sk-ant-client-key"), option.WithBaseURL(cloudSluice(t, windowed, b)), option.WithMaxRetries(0))
				ctx := context.Background()
				p := anthropic.MessageNewParams{Model: "claude-sonnet-4-5", MaxTokens: 64,
					Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hello"))}}
				msg, err := c.Messages.New(ctx, p)
				if err != nil || len(msg.Content) == 0 || msg.Content[0].Text == "" {
					t.Fatalf("Messages.New: %+v, %v", msg, err)
				}
				stream := c.Messages.NewStreaming(ctx, p)
				var acc anthropic.Message
				for stream.Next() {
					if err := acc.Accumulate(stream.Current()); err != nil {
						t.Fatal(err)
					}
				}
				if err := stream.Err(); err != nil || len(acc.Content) == 0 || acc.Content[0].Text != msg.Content[0].Text {
					t.Fatalf("stream: %v; text %+v, want %q", err, acc.Content, msg.Content[0].Text)
				}
				stream.Close()
				n, err := c.Messages.CountTokens(ctx, anthropic.MessageCountTokensParams{Model: p.Model, Messages: p.Messages})
				if err != nil || n.InputTokens != msg.Usage.InputTokens {
					t.Errorf("CountTokens = %+v, %v; want %d", n, err, msg.Usage.InputTokens)
				}
				reqs := s.Requests()[before:]
				if len(reqs) != 3 {
					t.Fatalf("%d calls reached the cloud; want 3", len(reqs))
				}
				for _, r := range reqs {
					if want := map[string]string{"bedrock": "/model/", "vertex": "/v1/projects/sim-project/"}[kind]; !strings.HasPrefix(r.Path, want) {
						t.Errorf("the cloud was called at %s; want its own path (%s...)", r.Path, want)
					}
					if r.Header.Get("X-Api-Key") != "" || strings.Contains(string(r.Body), "sk-ant-client-key") {
						t.Error("the client's key reached the cloud")
					}
				}
			})
		}
	}
}

// TestCloudTakesOverFromAFailingFirstParty: a first-party backend that
// answers 529 is failed over to a Bedrock backend before the client sees
// an error.
func TestCloudTakesOverFromAFailingFirstParty(t *testing.T) {
	s := cloudtest.Start(t, cloudtest.Config())
	cloudtest.DefaultChains(t)
	var overloaded atomic.Int32
	first := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		overloaded.Add(1)
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(529)
		io.WriteString(w, `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`)
	}))
	t.Cleanup(first.Close)
	u, _ := url.Parse(first.URL)
	t.Setenv("SLUICE_TEST_FIRST_PARTY_KEY", "sk-ant-first-party")
	base := cloudSluice(t, true,
		config.Backend{Name: "api", Kind: "anthropic", URL: u, Keys: []string{"env:SLUICE_TEST_FIRST_PARTY_KEY"}},
		config.Backend{Name: "aws", Kind: "bedrock", Region: "us-east-1", Endpoint: s.URL})
	c := anthropic.NewClient(option.WithAPIKey("sk-ant-client-key"), option.WithBaseURL(base), option.WithMaxRetries(0))
	msg, err := c.Messages.New(context.Background(), anthropic.MessageNewParams{Model: "claude-sonnet-4-5", MaxTokens: 16,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hello"))}})
	if err != nil || len(msg.Content) == 0 {
		t.Fatalf("Messages.New: %+v, %v; want Bedrock's answer", msg, err)
	}
	if overloaded.Load() != 1 || len(s.Requests()) != 1 {
		t.Errorf("first party called %d times, Bedrock %d; want once each", overloaded.Load(), len(s.Requests()))
	}
}
