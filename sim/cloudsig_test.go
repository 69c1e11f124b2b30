package sim_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"

	"github.com/sluicehq/sluice/internal/cloudtest"
)

// signedInvoke is an InvokeModel request for body, signed by the AWS SDK's
// signer over host, x-amz-date and x-amz-content-sha256 and the headers in
// sign, but not content-length (as the TypeScript SDK's signer signs);
// after signing, extra headers are set (a proxy's or a client's own).
func signedInvoke(t *testing.T, url, secret, body string, sign, extra map[string]string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url+"/model/"+bedrockModel+"/invoke", nil)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte(body))
	req.Header.Set("X-Amz-Content-Sha256", hex.EncodeToString(sum[:]))
	for k, v := range sign {
		req.Header.Set(k, v)
	}
	creds := aws.Credentials{AccessKeyID: cloudtest.AccessKeyID, SecretAccessKey: secret}
	if err := v4.NewSigner().SignHTTP(context.Background(), creds, req, hex.EncodeToString(sum[:]), "bedrock", "us-east-1", time.Now()); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(req.Header.Get("Authorization"), "content-length") {
		t.Fatal("the signature names content-length; this test signs without it")
	}
	req.Body = io.NopCloser(bytes.NewReader([]byte(body)))
	req.ContentLength = int64(len(body))
	for k, v := range extra {
		req.Header.Set(k, v)
	}
	return req
}

// TestBedrockVerifiesTheHeadersTheClientSigned: Bedrock verifies a SigV4
// signature over the headers the client named in SignedHeaders, as AWS
// does, whether or not content-length is among them; a named header
// changed after signing, or one the client did not name but the server
// never signs, is refused or ignored as AWS would. Before, the simulator
// signed content-length in again whatever the client named, and refused
// the TypeScript SDK's every request with 403 InvalidSignatureException.
func TestBedrockVerifiesTheHeadersTheClientSigned(t *testing.T) {
	s := cloudtest.Start(t, cloudtest.Config())
	body := `{"anthropic_version":"2026-10-21","max_tokens":16,"messages":[{"role":"user","content":"hello"}]}`
	signed := map[string]string{"Accept": "application/json", "Content-Type": "application/json", "X-Stainless-Retry-Count": "0"}
	for _, tc := range []struct {
		name   string
		secret string
		extra  map[string]string
		want   int
		kind   string
	}{
		{"as signed", cloudtest.SecretAccessKey, nil, http.StatusOK, ""},
		{"an unsigned header added", cloudtest.SecretAccessKey, map[string]string{"X-Forwarded-For": "10.0.0.1", "User-Agent": "proxy/1"}, http.StatusOK, ""},
		{"a signed header changed", cloudtest.SecretAccessKey, map[string]string{"X-Stainless-Retry-Count": "1"}, http.StatusForbidden, "InvalidSignatureException"},
		{"a signed header dropped", cloudtest.SecretAccessKey, map[string]string{"Accept": ""}, http.StatusForbidden, "InvalidSignatureException"},
		{"another secret", "not-the-secret", nil, http.StatusForbidden, "InvalidSignatureException"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := signedInvoke(t, s.URL, tc.secret, body, signed, nil)
			for k, v := range tc.extra {
				if v == "" {
					req.Header.Del(k)
				} else {
					req.Header.Set(k, v)
				}
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			got := cloudtest.Body(t, resp)
			if resp.StatusCode != tc.want || !strings.HasPrefix(resp.Header.Get("X-Amzn-Errortype"), tc.kind) {
				t.Errorf("%d %s %s; want %d %s", resp.StatusCode, resp.Header.Get("X-Amzn-Errortype"), got, tc.want, tc.kind)
			}
		})
	}
}

// TestCloudsTakeTheAPIVersion: Bedrock and Vertex AI take the API version
// the 1.x SDKs copy into the body (2026-10-21) beside each cloud's own,
// and refuse any other with the cloud's 400.
func TestCloudsTakeTheAPIVersion(t *testing.T) {
	s := cloudtest.Start(t, cloudtest.Config())
	for _, tc := range []struct {
		version string
		want    int
	}{{"bedrock-2023-05-31", 200}, {"2026-10-21", 200}, {"2023-06-01", 400}, {"vertex-2023-10-16", 400}} {
		body := `{"anthropic_version":"` + tc.version + `","max_tokens":16,"messages":[{"role":"user","content":"hello"}]}`
		resp, err := http.DefaultClient.Do(signedInvoke(t, s.URL, cloudtest.SecretAccessKey, body, nil, nil))
		if err != nil {
			t.Fatal(err)
		}
		if got := cloudtest.Body(t, resp); resp.StatusCode != tc.want {
			t.Errorf("bedrock, anthropic_version %s: %d %s; want %d", tc.version, resp.StatusCode, got, tc.want)
		}
	}
	for _, tc := range []struct {
		version string
		want    int
	}{{"vertex-2023-10-16", 200}, {"2026-10-21", 200}, {"2023-06-01", 400}, {"bedrock-2023-05-31", 400}} {
		body := `{"anthropic_version":"` + tc.version + `","max_tokens":16,"messages":[{"role":"user","content":"hello"}]}`
		req, _ := http.NewRequest(http.MethodPost, s.URL+"/v1/projects/p/locations/us-east5/publishers/anthropic/models/claude-sonnet-4-5@20250929:rawPredict", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+cloudtest.VertexToken)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if got := cloudtest.Body(t, resp); resp.StatusCode != tc.want {
			t.Errorf("vertex, anthropic_version %s: %d %s; want %d", tc.version, resp.StatusCode, got, tc.want)
		}
	}
}
