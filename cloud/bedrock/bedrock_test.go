package bedrock

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws/protocol/eventstream"
	"github.com/aws/aws-sdk-go-v2/aws/protocol/eventstream/eventstreamapi"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/internal/cloudtest"
	"github.com/sluicehq/sluice/upstream"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const hello = `{"model":"claude-sonnet-4-5","max_tokens":64,"messages":[{"role":"user","content":"hello"}]}`

// newClient is a client of the simulator at url signing with secret;
// hdr are test headers its transport adds after signing.
func newClient(t *testing.T, url, secret string, hdr ...string) *Client {
	t.Helper()
	c, err := New(context.Background(), Options{Name: "east", Region: "us-east-1", Endpoint: url,
		Credentials: credentials.NewStaticCredentialsProvider(cloudtest.AccessKeyID, secret, ""),
		HTTPClient:  cloudtest.Client(t, hdr...)})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestInvokeJSON(t *testing.T) {
	s := cloudtest.Start(t, cloudtest.Config())
	c := newClient(t, s.URL, cloudtest.SecretAccessKey)
	resp := cloudtest.Do(t, c, "/v1/messages", hello, "anthropic-beta", "context-1m-2025-08-07, interleaved-thinking-2025-05-14")
	body := cloudtest.Body(t, resp)
	var msg struct {
		Type    string                  `json:"type"`
		Model   string                  `json:"model"`
		Content []struct{ Text string } `json:"content"`
	}
	if resp.StatusCode != 200 || json.Unmarshal([]byte(body), &msg) != nil || msg.Type != "message" || len(msg.Content) == 0 || msg.Content[0].Text == "" {
		t.Fatalf("answer %d %s; want a message", resp.StatusCode, body)
	}
	if resp.Header.Get("Content-Type") != "application/json" || !strings.HasPrefix(resp.Header.Get("Request-Id"), "req_") {
		t.Errorf("headers %v; want application/json and the cloud's request id as Request-Id", resp.Header)
	}
	got := s.Last(t)
	if got.Path != "/model/global.anthropic.claude-sonnet-4-5-20250929-v1%3A0/invoke" {
		t.Errorf("path %q; want the mapped model id, escaped, /invoke", got.Path)
	}
	for _, h := range []string{"X-Api-Key", "Anthropic-Version", "Anthropic-Beta"} {
		if v := got.Header.Get(h); v != "" {
			t.Errorf("%s: %q reached Bedrock; a client's headers stay with sluice", h, v)
		}
	}
	var sent map[string]json.RawMessage
	_ = json.Unmarshal(got.Body, &sent)
	if string(sent["anthropic_version"]) != `"bedrock-2023-05-31"` || string(sent["anthropic_beta"]) != `["context-1m-2025-08-07","interleaved-thinking-2025-05-14"]` {
		t.Errorf("body %s; want anthropic_version and the betas as anthropic_beta", got.Body)
	}
	if _, ok := sent["model"]; ok {
		t.Errorf("body %s keeps model", got.Body)
	}
}

// events reads an SSE body into (name, data) pairs, checking that each
// data's type is its event's name.
func events(t *testing.T, resp *http.Response) [][2]string {
	t.Helper()
	defer resp.Body.Close()
	var out [][2]string
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	var name string
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			name = line[len("event: "):]
		case strings.HasPrefix(line, "data: "):
			data := line[len("data: "):]
			var typ struct{ Type string }
			if json.Unmarshal([]byte(data), &typ) != nil || typ.Type != name {
				t.Errorf("event %s carries %s", name, data)
			}
			out = append(out, [2]string{name, data})
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("read the stream: %v", err)
	}
	return out
}

func TestInvokeStream(t *testing.T) {
	s := cloudtest.Start(t, cloudtest.Config())
	c := newClient(t, s.URL, cloudtest.SecretAccessKey)
	plain := cloudtest.Body(t, cloudtest.Do(t, c, "/v1/messages", hello))
	resp := cloudtest.Do(t, c, "/v1/messages", strings.Replace(hello, `"max_tokens"`, `"stream":true,"max_tokens"`, 1))
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") || resp.Header.Get("Request-Id") == "" {
		t.Fatalf("answer %d %v; want 200 text/event-stream with a Request-Id", resp.StatusCode, resp.Header)
	}
	evs := events(t, resp)
	if len(evs) < 5 || evs[0][0] != "message_start" || evs[len(evs)-1][0] != "message_stop" {
		t.Fatalf("events %v; want message_start … message_stop", evs)
	}
	var text strings.Builder
	for _, ev := range evs {
		var d struct {
			Delta struct{ Text string } `json:"delta"`
		}
		if ev[0] == "content_block_delta" && json.Unmarshal([]byte(ev[1]), &d) == nil {
			text.WriteString(d.Delta.Text)
		}
	}
	if text.Len() == 0 || !strings.Contains(plain, text.String()) {
		t.Errorf("streamed text %q; want the invoked reply's (%s)", text.String(), plain)
	}
	if got := s.Last(t).Path; !strings.HasSuffix(got, "/invoke-with-response-stream") {
		t.Errorf("path %q; want invoke-with-response-stream", got)
	}
	var sent map[string]json.RawMessage
	_ = json.Unmarshal(s.Last(t).Body, &sent)
	if _, ok := sent["stream"]; ok {
		t.Errorf("body %s keeps stream", s.Last(t).Body)
	}
}

func TestMidstreamExceptionIsAnErrorEvent(t *testing.T) {
	s := cloudtest.Start(t, cloudtest.Config())
	c := newClient(t, s.URL, cloudtest.SecretAccessKey, "x-sim-fault", "midstream-error")
	evs := events(t, cloudtest.Do(t, c, "/v1/messages", strings.Replace(hello, `"max_tokens"`, `"stream":true,"max_tokens"`, 1)))
	last := evs[len(evs)-1]
	if len(evs) < 2 || last[0] != "error" || !strings.Contains(last[1], `"overloaded_error"`) || !strings.Contains(last[1], "serviceUnavailableException") {
		t.Errorf("events %v; want Messages events, then an overloaded_error event naming the exception", evs)
	}
}

// TestCutStreamIsAReadError: a stream whose connection drops mid-way ends
// with a read error, not a clean end the relay would take for a whole
// answer.
func TestCutStreamIsAReadError(t *testing.T) {
	s := cloudtest.Start(t, cloudtest.Config())
	c := newClient(t, s.URL, cloudtest.SecretAccessKey, "x-sim-fault", "reset")
	resp := cloudtest.Do(t, c, "/v1/messages", strings.Replace(hello, `"max_tokens"`, `"stream":true,"max_tokens"`, 1))
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err == nil || !strings.Contains(string(b), "event: message_start") {
		t.Errorf("read %q, then %v; want the first events, then an error", b, err)
	}
}

func TestCountTokens(t *testing.T) {
	s := cloudtest.Start(t, cloudtest.Config())
	c := newClient(t, s.URL, cloudtest.SecretAccessKey)
	var reply struct {
		Usage struct {
			InputTokens int `json:"input_tokens"`
		} `json:"usage"`
	}
	_ = json.Unmarshal([]byte(cloudtest.Body(t, cloudtest.Do(t, c, "/v1/messages", hello))), &reply)
	count := `{"model":"claude-sonnet-4-5","messages":[{"role":"user","content":"hello"}]}`
	resp := cloudtest.Do(t, c, "/v1/messages/count_tokens", count)
	body := cloudtest.Body(t, resp)
	if want := `{"input_tokens":` + itoa(reply.Usage.InputTokens) + `}`; resp.StatusCode != 200 || body != want {
		t.Errorf("count_tokens %d %s; want %s", resp.StatusCode, body, want)
	}
	if got := s.Last(t).Path; got != "/model/global.anthropic.claude-sonnet-4-5-20250929-v1%3A0/count-tokens" {
		t.Errorf("path %q; want CountTokens of the mapped model", got)
	}
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

func TestErrorsMapped(t *testing.T) {
	s := cloudtest.Start(t, cloudtest.Config())
	cloudtest.CheckErrors(t, `bedrock backend "east"`, []cloudtest.ErrorCase{
		{Name: "throttled", Fault: "429", Body: hello, Status: 429, Type: "rate_limit_error", Cause: "ThrottlingException"},
		{Name: "unavailable", Fault: "529", Body: hello, Status: 529, Type: "overloaded_error", Cause: "ServiceUnavailableException"},
		{Name: "denied", Fault: "403", Body: hello, Status: 403, Type: "permission_error", Cause: "AccessDeniedException"},
		{Name: "invalid", Fault: "", Body: `{"model":"claude-sonnet-4-5","messages":[{"role":"user","content":"hello"}]}`, Status: 400, Type: "invalid_request_error", Cause: "ValidationException"},
		{Name: "internal", Fault: "500", Body: hello, Status: 500, Type: "api_error", Cause: "InternalServerException"},
	}, func(hdr ...string) upstream.Backend { return newClient(t, s.URL, cloudtest.SecretAccessKey, hdr...) })
	t.Run("wrong signature", func(t *testing.T) {
		resp := cloudtest.Do(t, newClient(t, s.URL, "not-the-secret"), "/v1/messages", hello)
		cloudtest.WantError(t, resp, 403, "permission_error", "InvalidSignatureException", "check the AWS credentials")
	})
}

func TestMapStatus(t *testing.T) {
	for _, c := range []struct {
		kind   string
		status int
		want   int
		typ    string
	}{
		{"ThrottlingException", 429, 429, "rate_limit_error"},
		{"throttlingException", 0, 429, "rate_limit_error"},
		{"ServiceUnavailableException", 503, 529, "overloaded_error"},
		{"ModelNotReadyException", 429, 529, "overloaded_error"},
		{"ValidationException", 400, 400, "invalid_request_error"},
		{"AccessDeniedException", 403, 403, "permission_error"},
		{"ResourceNotFoundException", 404, 404, "not_found_error"},
		{"ModelTimeoutException", 408, 504, "timeout_error"},
		{"", 503, 529, "overloaded_error"},
		{"SomethingNew", 418, 418, "invalid_request_error"},
	} {
		st, typ := mapStatus(c.kind, c.status)
		if st != c.want || typ != c.typ {
			t.Errorf("mapStatus(%q, %d) = %d %s; want %d %s", c.kind, c.status, st, typ, c.want, c.typ)
		}
	}
}

func TestUnmappedModelAndOtherEndpoints(t *testing.T) {
	s := cloudtest.Start(t, cloudtest.Config())
	c := newClient(t, s.URL, cloudtest.SecretAccessKey)
	cloudtest.WantError(t, cloudtest.Do(t, c, "/v1/messages", strings.Replace(hello, "claude-sonnet-4-5", "claude-nonesuch-9", 1)),
		400, "invalid_request_error", `"claude-nonesuch-9"`, `bedrock backend "east"`)
	cloudtest.WantError(t, cloudtest.Do(t, c, "/v1/messages/batches", `{"requests":[]}`), 400, "invalid_request_error", "Message Batches are not offered")
	if n := len(s.Requests()); n != 0 {
		t.Errorf("%d requests reached Bedrock; want none", n)
	}
	over, err := New(context.Background(), Options{Region: "eu-west-1", Endpoint: s.URL, Models: map[string]string{"claude-nonesuch-9": "eu.anthropic.claude-nonesuch-9-v1:0", "claude-sonnet-4-5": ""},
		Credentials: credentials.NewStaticCredentialsProvider(cloudtest.AccessKeyID, cloudtest.SecretAccessKey, ""), HTTPClient: cloudtest.Client(t)})
	if err != nil {
		t.Fatal(err)
	}
	resp := cloudtest.Do(t, over, "/v1/messages", strings.Replace(hello, "claude-sonnet-4-5", "claude-nonesuch-9", 1))
	if body := cloudtest.Body(t, resp); resp.StatusCode != 200 {
		t.Errorf("an added model: %d %s", resp.StatusCode, body)
	}
	cloudtest.WantError(t, cloudtest.Do(t, over, "/v1/messages", hello), 400, "invalid_request_error", `"claude-sonnet-4-5"`)
}

// TestRetryResigned: each Do signs for its own moment, so a retry after
// time moved carries a new date and a new signature, both valid.
func TestRetryResigned(t *testing.T) {
	s := cloudtest.Start(t, cloudtest.Config())
	c := newClient(t, s.URL, cloudtest.SecretAccessKey)
	t0 := time.Now().UTC().Truncate(time.Second)
	for i, at := range []time.Time{t0, t0.Add(2 * time.Second)} {
		c.now = func() time.Time { return at }
		if resp := cloudtest.Do(t, c, "/v1/messages", hello); resp.StatusCode != 200 {
			t.Fatalf("attempt %d: %d %s", i, resp.StatusCode, cloudtest.Body(t, resp))
		} else {
			resp.Body.Close()
		}
	}
	r := s.Requests()
	d0, d1 := r[0].Header.Get("X-Amz-Date"), r[1].Header.Get("X-Amz-Date")
	if d0 != t0.Format("20060102T150405Z") || d1 != t0.Add(2*time.Second).Format("20060102T150405Z") {
		t.Errorf("dates %s, %s; want each attempt's own", d0, d1)
	}
	if a0, a1 := r[0].Header.Get("Authorization"), r[1].Header.Get("Authorization"); a0 == a1 || !strings.Contains(a1, "Signature=") {
		t.Errorf("signatures %q and %q; want two different ones", a0, a1)
	}
}

func TestDefaultCredentialChain(t *testing.T) {
	s := cloudtest.Start(t, cloudtest.Config())
	t.Setenv("AWS_ACCESS_KEY_ID", cloudtest.AccessKeyID)
	t.Setenv("AWS_SECRET_ACCESS_KEY", cloudtest.SecretAccessKey)
	t.Setenv("AWS_SESSION_TOKEN", "")
	t.Setenv("AWS_PROFILE", "")
	t.Setenv("AWS_CONFIG_FILE", t.TempDir()+"/none")
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", t.TempDir()+"/none")
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true") // never the link-local metadata address
	c, err := New(context.Background(), Options{Region: "us-east-1", Endpoint: s.URL, HTTPClient: cloudtest.Client(t)})
	if err != nil {
		t.Fatal(err)
	}
	if resp := cloudtest.Do(t, c, "/v1/messages", hello); resp.StatusCode != 200 {
		t.Fatalf("signed from the environment: %d %s", resp.StatusCode, cloudtest.Body(t, resp))
	} else {
		resp.Body.Close()
	}
}

func TestNoConnection(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	c := newClient(t, "http://"+addr, cloudtest.SecretAccessKey)
	_, err = c.Do(context.Background(), cloudtest.Request("/v1/messages", hello), strings.NewReader(hello), int64(len(hello)))
	var ue *upstream.Error
	if !errors.As(err, &ue) || !ue.Dial || ue.Upstream != "http://"+addr {
		t.Errorf("Do to a closed port: %v; want an *upstream.Error with Dial set", err)
	}
}

// TestCacheControlKept: every cache_control reaches Bedrock where the
// client put it, on tools, system and message blocks alike, and the
// simulator caches by them.
func TestCacheControlKept(t *testing.T) {
	cfg := cloudtest.Config()
	cfg.MinCacheTokens = 64
	s := cloudtest.Start(t, cfg)
	c := newClient(t, s.URL, cloudtest.SecretAccessKey)
	body := cloudtest.CachedBody("claude-sonnet-4-5", false)
	resp := cloudtest.Do(t, c, "/v1/messages", body)
	var reply struct {
		Usage struct {
			CacheCreation int `json:"cache_creation_input_tokens"`
		} `json:"usage"`
	}
	if got := cloudtest.Body(t, resp); json.Unmarshal([]byte(got), &reply) != nil || resp.StatusCode != 200 || reply.Usage.CacheCreation == 0 {
		t.Errorf("answer %d %s; want a reply that wrote the cache", resp.StatusCode, got)
	}
	want := cloudtest.CacheControls(t, []byte(body))
	if len(want) != 4 {
		t.Fatalf("the test body has %d cache_control; want 4", len(want))
	}
	if got := cloudtest.CacheControls(t, s.Last(t).Body); !reflect.DeepEqual(got, want) {
		t.Errorf("cache_control at Bedrock %v; want the client's %v", got, want)
	}
}

// TestSecretsNeverInErrors plants a secret access key and a session token
// and looks for them in everything a failure leaves: the answers (a
// refused signature, AWS errors and a stream exception that quote the
// canonical request, as AWS's signature errors do) and the error of a
// failed connection; and the secret key in what reached the wire.
func TestSecretsNeverInErrors(t *testing.T) {
	const secret = "PLANTED-secret-access-key-do-not-leak"
	const token = "PLANTED-session-token-do-not-leak"
	planted := func(url string) *Client {
		c, err := New(context.Background(), Options{Name: "east", Region: "us-east-1", Endpoint: url,
			Credentials: credentials.NewStaticCredentialsProvider(cloudtest.AccessKeyID, secret, token), HTTPClient: cloudtest.Client(t)})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	var texts []string
	answer := func(resp *http.Response) {
		texts = append(texts, cloudtest.Body(t, resp), fmt.Sprint(resp.Header))
	}

	s := cloudtest.Start(t, cloudtest.Config()) // its secret is not the planted one
	resp := cloudtest.Do(t, planted(s.URL), "/v1/messages", hello)
	if resp.StatusCode != 403 {
		t.Errorf("a wrong secret: %d; want 403", resp.StatusCode)
	}
	answer(resp)
	// On the wire the session token travels, as SigV4 has it; the secret
	// access key never does.
	var wire []string
	for _, r := range s.Requests() {
		wire = append(wire, fmt.Sprint(r.Header), string(r.Body))
	}
	if leaks := cloudtest.Leaks(secret, wire...); len(wire) == 0 || len(leaks) > 0 {
		t.Errorf("the secret access key went on the wire: %q", leaks)
	}

	quoting := "The request signature we calculated does not match. The Canonical String for this request should have been\n'POST\n/model/x/invoke\nx-amz-security-token:" + token + "\n'"
	oneLine := "bad request from key " + cloudtest.AccessKeyID + " signed with " + secret + " and token " + token
	fake := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case strings.HasSuffix(r.URL.Path, "/invoke-with-response-stream"):
			w.Header().Set("Content-Type", "application/vnd.amazon.eventstream")
			var msg eventstream.Message
			msg.Headers.Set(eventstreamapi.MessageTypeHeader, eventstream.StringValue(eventstreamapi.ExceptionMessageType))
			msg.Headers.Set(eventstreamapi.ExceptionTypeHeader, eventstream.StringValue("validationException"))
			msg.Payload, _ = json.Marshal(map[string]string{"message": oneLine})
			_ = eventstream.NewEncoder().Encode(w, msg)
		case r.Header.Get("X-Quote") == "multi":
			w.Header().Set("X-Amzn-Errortype", "InvalidSignatureException:http://internal.amazon.com/coral/com.amazon.coral.service/")
			w.WriteHeader(403)
			_ = json.NewEncoder(w).Encode(map[string]string{"message": quoting})
		default:
			w.Header().Set("X-Amzn-Errortype", "ValidationException")
			w.WriteHeader(400)
			_ = json.NewEncoder(w).Encode(map[string]string{"message": oneLine})
		}
	}))
	defer fake.Close()
	fc := planted(fake.URL)
	fc.b.HTTP = cloudtest.Client(t, "X-Quote", "multi")
	answer(cloudtest.Do(t, fc, "/v1/messages", hello))
	fc.b.HTTP = cloudtest.Client(t)
	answer(cloudtest.Do(t, fc, "/v1/messages", hello))
	answer(cloudtest.Do(t, fc, "/v1/messages", strings.Replace(hello, `"max_tokens"`, `"stream":true,"max_tokens"`, 1)))

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + ln.Addr().String()
	ln.Close()
	_, err = planted(closed).Do(context.Background(), cloudtest.Request("/v1/messages", hello), strings.NewReader(hello), int64(len(hello)))
	texts = append(texts, fmt.Sprint(err))

	if len(texts) < 9 {
		t.Fatalf("collected %d texts; the test lost some", len(texts))
	}
	for _, planted := range []string{secret, token} {
		if leaks := cloudtest.Leaks(planted, texts...); len(leaks) > 0 {
			t.Errorf("%s leaked into %q", planted, leaks)
		}
	}
	if !strings.Contains(strings.Join(texts, "\n"), "[redacted]") {
		t.Errorf("no answer was scrubbed; the fake's quoting errors did not reach the check")
	}
}

// TestLeakCheckFindsAPlantedSecret: the check above can fail.
func TestLeakCheckFindsAPlantedSecret(t *testing.T) {
	texts := []string{"nothing here", "bedrock backend: ValidationException: signed with s3cret-key", "neither"}
	if got := cloudtest.Leaks("s3cret-key", texts...); len(got) != 1 || got[0] != texts[1] {
		t.Errorf("Leaks found %q; want the one text that quotes the secret", got)
	}
}

// TestProfile: a backend's profile picks its own credentials from the
// shared files, over the environment's.
func TestProfile(t *testing.T) {
	s := cloudtest.Start(t, cloudtest.Config())
	dir := t.TempDir()
	creds := dir + "/credentials"
	if err := os.WriteFile(creds, []byte("[east]\naws_access_key_id = "+cloudtest.AccessKeyID+"\naws_secret_access_key = "+cloudtest.SecretAccessKey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", creds)
	t.Setenv("AWS_CONFIG_FILE", dir+"/none")
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIAOTHERACCOUNT0000") // another account's, in the environment
	t.Setenv("AWS_SECRET_ACCESS_KEY", "other-secret")
	t.Setenv("AWS_PROFILE", "")
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	for _, c := range []struct {
		profile string
		want    int
	}{{"east", 200}, {"", 403}} {
		b, err := New(context.Background(), Options{Region: "us-east-1", Endpoint: s.URL, Profile: c.profile, HTTPClient: cloudtest.Client(t)})
		if err != nil {
			t.Fatal(err)
		}
		resp := cloudtest.Do(t, b, "/v1/messages", hello)
		if body := cloudtest.Body(t, resp); resp.StatusCode != c.want {
			t.Errorf("profile %q: %d %s; want %d", c.profile, resp.StatusCode, body, c.want)
		}
	}
}

// TestARNModel: an inference profile ARN, slashes and colons, is one path
// segment, signed as sent.
func TestARNModel(t *testing.T) {
	s := cloudtest.Start(t, cloudtest.Config())
	arn := "arn:aws:bedrock:us-east-1:123456789012:application-inference-profile/us.anthropic.claude-haiku-4-5-20251001-v1:0"
	c, err := New(context.Background(), Options{Region: "us-east-1", Endpoint: s.URL, Models: map[string]string{"claude-haiku-4-5": arn},
		Credentials: credentials.NewStaticCredentialsProvider(cloudtest.AccessKeyID, cloudtest.SecretAccessKey, ""), HTTPClient: cloudtest.Client(t)})
	if err != nil {
		t.Fatal(err)
	}
	resp := cloudtest.Do(t, c, "/v1/messages", strings.Replace(hello, "claude-sonnet-4-5", "claude-haiku-4-5", 1))
	if body := cloudtest.Body(t, resp); resp.StatusCode != 200 || !strings.Contains(body, `"model":"claude-haiku-4-5-20251001"`) {
		t.Errorf("answer %d %s; want a reply from the profile's model", resp.StatusCode, body)
	}
	if got, want := s.Last(t).Path, "/model/arn%3Aaws%3Abedrock%3Aus-east-1%3A123456789012%3Aapplication-inference-profile%2Fus.anthropic.claude-haiku-4-5-20251001-v1%3A0/invoke"; got != want {
		t.Errorf("path %s; want %s", got, want)
	}
}

// TestOfficialSDKThroughBackend: the Go SDK, speaking the Messages API to
// a relay in front of this backend, accepts every answer.
func TestOfficialSDKThroughBackend(t *testing.T) {
	s := cloudtest.Start(t, cloudtest.Config())
	cloudtest.CheckWithSDK(t, "claude-sonnet-4-5", func(hdr ...string) upstream.Backend {
		return newClient(t, s.URL, cloudtest.SecretAccessKey, hdr...)
	})
}
