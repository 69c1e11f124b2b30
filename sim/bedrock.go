package sim

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/protocol/eventstream"
	"github.com/aws/aws-sdk-go-v2/aws/protocol/eventstream/eventstreamapi"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"

	"github.com/sluicehq/sluice/apierror"
)

// bedrockVersion is Bedrock's own anthropic_version for the body; the
// body may name the API version instead (cloudAPIVersions).
const bedrockVersion = "bedrock-2023-05-31"

// bedrockSkew is how far a signature's time may be from the server's, as
// AWS allows.
const bedrockSkew = 5 * time.Minute

// handleBedrock serves InvokeModel, InvokeModelWithResponseStream and
// CountTokens for Anthropic models.
func (s *Server) handleBedrock(w http.ResponseWriter, r *http.Request) {
	op := r.URL.Path[strings.LastIndexByte(r.URL.Path, '/')+1:]
	t := newTranslated(w, "X-Amzn-Requestid")
	t.wantStream = op == "invoke-with-response-stream"
	t.streamType = "application/vnd.amazon.eventstream"
	t.holdOK = op == "count-tokens"
	if t.wantStream {
		t.stream = bedrockFrames(w)
	}
	defer finishBedrock(t, op)

	body, aerr := readBody(t, r, maxMessagesBody)
	if aerr != nil {
		writeError(t, aerr)
		return
	}
	akid, bad := s.checkSigV4(r, body)
	if bad != nil {
		writeBedrockError(w, http.StatusForbidden, bad.kind, bad.msg)
		t.status = -1 // answered
		return
	}
	model := bedrockToModel(r.PathValue("model"))
	if op == "count-tokens" {
		var in struct {
			Input struct {
				InvokeModel *struct {
					Body []byte `json:"body"`
				} `json:"invokeModel"`
			} `json:"input"`
		}
		if err := json.Unmarshal(body, &in); err != nil || in.Input.InvokeModel == nil {
			writeError(t, errInvalid("input.invokeModel.body: required; CountTokens takes an InvokeModel body"))
			return
		}
		body = in.Input.InvokeModel.Body
	}
	msgs, betas, aerr := bedrockToMessages(body, model, op == "invoke-with-response-stream")
	if aerr != nil {
		writeError(t, aerr)
		return
	}
	key := "bedrock " + akid
	if op == "count-tokens" {
		s.handleCountTokens(t, cloudRequest(r, "/v1/messages/count_tokens", msgs, key, betas))
		return
	}
	s.handleMessages(t, cloudRequest(r, "/v1/messages", msgs, key, betas))
}

// bedrockModelSuffix is a Bedrock model id's version suffix (-v1:0, -v1).
var bedrockModelSuffix = regexp.MustCompile(`-v\d+(:\d+)?$`)

// bedrockToModel is the API's model id for a Bedrock model id, inference
// profile id or ARN: what follows "anthropic.", less the version suffix.
func bedrockToModel(id string) string {
	if i := strings.LastIndex(id, "anthropic."); i >= 0 {
		id = id[i+len("anthropic."):]
	}
	return bedrockModelSuffix.ReplaceAllString(id, "")
}

// bedrockToMessages checks a Bedrock body as Bedrock does and rewrites it
// into a Messages body for model: anthropic_version required, no model or
// stream member, anthropic_beta's list out to the header.
func bedrockToMessages(body []byte, model string, stream bool) ([]byte, []string, *apierror.Error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil || fields == nil {
		return nil, nil, errInvalid("Malformed input request: the body is not a JSON object, please reformat your input and try again.")
	}
	var version string
	_ = json.Unmarshal(fields["anthropic_version"], &version)
	if version != bedrockVersion && !cloudAPIVersions[version] {
		return nil, nil, errInvalid("Malformed input request: anthropic_version: must be " + bedrockVersion + " or " + cloudAPIVersionList + ", please reformat your input and try again.")
	}
	for _, k := range []string{"model", "stream"} {
		if _, ok := fields[k]; ok {
			return nil, nil, errInvalid("Malformed input request: extraneous key [" + k + "] is not permitted, please reformat your input and try again.")
		}
	}
	var betas []string
	if b, ok := fields["anthropic_beta"]; ok {
		if err := json.Unmarshal(b, &betas); err != nil {
			return nil, nil, errInvalid("Malformed input request: anthropic_beta: must be an array of strings, please reformat your input and try again.")
		}
	}
	delete(fields, "anthropic_version")
	delete(fields, "anthropic_beta")
	fields["model"], _ = json.Marshal(model)
	if stream {
		fields["stream"] = json.RawMessage("true")
	}
	out, err := json.Marshal(fields)
	if err != nil {
		return nil, nil, errInvalid("Malformed input request: " + err.Error())
	}
	return out, betas, nil
}

// sigV4Parts is an Authorization header's SignedHeaders and Signature.
func sigV4Parts(auth string) (signed, sig string) {
	_, rest, _ := strings.Cut(auth, " ")
	for _, part := range strings.Split(rest, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(part), "=")
		switch k {
		case "SignedHeaders":
			signed = v
		case "Signature":
			sig = v
		}
	}
	return signed, sig
}

// authError is an AWS authentication failure: its type and message.
type authError struct{ kind, msg string }

func authFail(kind, msg string) *authError { return &authError{kind, msg} }

// checkSigV4 checks r's signature against the configured test credentials
// by signing the same request again with the SDK's signer, as AWS would.
// It returns the access key id, or the AWS error.
func (s *Server) checkSigV4(r *http.Request, body []byte) (string, *authError) {
	auth := r.Header.Get("Authorization")
	const alg = "AWS4-HMAC-SHA256 "
	if !strings.HasPrefix(auth, alg) {
		return "", authFail("MissingAuthenticationTokenException", "Missing Authentication Token")
	}
	var cred, signed string
	for _, part := range strings.Split(auth[len(alg):], ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(part), "=")
		switch k {
		case "Credential":
			cred = v
		case "SignedHeaders":
			signed = v
		}
	}
	scope := strings.Split(cred, "/") // AKID/date/region/service/aws4_request
	if len(scope) != 5 || scope[4] != "aws4_request" || signed == "" {
		return "", authFail("IncompleteSignatureException", "Authorization header requires Credential and SignedHeaders parameters of the form AKID/date/region/service/aws4_request")
	}
	akid, region, service := scope[0], scope[2], scope[3]
	if s.cfg.BedrockAccessKeyID == "" || akid != s.cfg.BedrockAccessKeyID {
		return "", authFail("UnrecognizedClientException", "The security token included in the request is invalid.")
	}
	if service != "bedrock" {
		return "", authFail("InvalidSignatureException", "Credential should be scoped to correct service: 'bedrock'.")
	}
	at, err := time.Parse("20060102T150405Z", r.Header.Get("X-Amz-Date"))
	if err != nil {
		return "", authFail("IncompleteSignatureException", "the X-Amz-Date header is missing or malformed")
	}
	if d := time.Since(at); d > bedrockSkew || d < -bedrockSkew {
		return "", authFail("InvalidSignatureException", "Signature expired: "+at.Format("20060102T150405Z")+" is more than 5 minutes from the server's time.")
	}
	// The request as the client signed it: its method, path, query, host
	// and the headers it named in SignedHeaders, nothing else, as AWS
	// verifies it. Clients choose differently: the AWS SDK for Go signs
	// content-length, the TypeScript SDK's smithy signer does not.
	again, _ := http.NewRequestWithContext(context.Background(), r.Method, "http://"+r.Host+r.URL.RequestURI(), nil)
	again.URL = &url.URL{Scheme: "http", Host: r.Host, Path: r.URL.Path, RawPath: r.URL.RawPath, RawQuery: r.URL.RawQuery}
	again.Host = r.Host
	for _, h := range strings.Split(signed, ";") {
		switch h {
		case "host":
		case "content-length":
			again.ContentLength = int64(len(body))
		default:
			if v, ok := r.Header[http.CanonicalHeaderKey(h)]; ok {
				again.Header[http.CanonicalHeaderKey(h)] = v
			}
		}
	}
	creds := aws.Credentials{AccessKeyID: akid, SecretAccessKey: s.cfg.BedrockSecretAccessKey, SessionToken: r.Header.Get("X-Amz-Security-Token")}
	sum := sha256.Sum256(body)
	if err := v4.NewSigner().SignHTTP(context.Background(), creds, again, hex.EncodeToString(sum[:]), service, region, at); err != nil {
		return "", authFail("InvalidSignatureException", err.Error())
	}
	gotSigned, gotSig := sigV4Parts(again.Header.Get("Authorization"))
	_, wantSig := sigV4Parts(auth)
	if gotSigned != signed {
		// The signer leaves out a header it never signs (user-agent,
		// expect, ...) or one the request lacks: AWS cannot verify a
		// signature over headers it did not get either.
		return "", authFail("InvalidSignatureException", "The request signature we calculated does not match the signature you provided: SignedHeaders "+signed+" name a header that is missing or never signed (verified over "+gotSigned+").")
	}
	if subtle.ConstantTimeCompare([]byte(gotSig), []byte(wantSig)) != 1 {
		return "", authFail("InvalidSignatureException", "The request signature we calculated does not match the signature you provided. Check your AWS Secret Access Key and signing method. Consult the service documentation for details.")
	}
	return akid, nil
}

// bedrockErrorFor is the Bedrock error an API status and type become.
func bedrockErrorFor(status int, typ string) (int, string) {
	switch {
	case status == http.StatusTooManyRequests:
		return http.StatusTooManyRequests, "ThrottlingException"
	case status == 529, typ == "overloaded_error":
		return http.StatusServiceUnavailable, "ServiceUnavailableException"
	case status == http.StatusForbidden, status == http.StatusUnauthorized:
		return http.StatusForbidden, "AccessDeniedException"
	case status == http.StatusNotFound:
		return http.StatusNotFound, "ResourceNotFoundException"
	case typ == "timeout_error":
		return http.StatusRequestTimeout, "ModelTimeoutException"
	case status >= 400 && status < 500:
		return http.StatusBadRequest, "ValidationException"
	}
	return http.StatusInternalServerError, "InternalServerException"
}

// writeBedrockError answers as Bedrock's REST-JSON protocol does: the type
// in x-amzn-ErrorType, the message in the body.
func writeBedrockError(w http.ResponseWriter, status int, kind, msg string) {
	body, _ := json.Marshal(map[string]string{"message": msg})
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("X-Amzn-Errortype", kind+":http://internal.amazon.com/coral/com.amazon.bedrock/")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// finishBedrock rewrites what the Messages handlers held: an error into
// Bedrock's, a count into CountTokens' answer.
func finishBedrock(t *translated, op string) {
	if !t.hold {
		return
	}
	if t.status >= 400 {
		e, _ := apierror.Decode(t.buf)
		st, kind := bedrockErrorFor(t.status, e.Error.Type)
		writeBedrockError(t.w, st, kind, e.Error.Message)
		return
	}
	var n struct {
		InputTokens int `json:"input_tokens"`
	}
	_ = json.Unmarshal(t.buf, &n)
	body, _ := json.Marshal(map[string]int{"inputTokens": n.InputTokens})
	t.w.Header().Set("Content-Type", "application/json")
	t.w.WriteHeader(t.status)
	_, _ = t.w.Write(body)
}

// bedrockFrames reframes SSE events as InvokeModelWithResponseStream
// sends them: each Messages event base64 in a chunk event's "bytes", an
// error event as an exception frame.
func bedrockFrames(w http.ResponseWriter) func(name string, data []byte) error {
	enc := eventstream.NewEncoder()
	return func(name string, data []byte) error {
		var msg eventstream.Message
		if name == "error" {
			e, _ := apierror.Decode(data)
			_, kind := bedrockErrorFor(0, e.Error.Type)
			if e.Error.Type == "rate_limit_error" {
				kind = "ThrottlingException"
			}
			msg.Headers.Set(eventstreamapi.MessageTypeHeader, eventstream.StringValue(eventstreamapi.ExceptionMessageType))
			msg.Headers.Set(eventstreamapi.ExceptionTypeHeader, eventstream.StringValue(strings.ToLower(kind[:1])+kind[1:]))
			msg.Payload, _ = json.Marshal(map[string]string{"message": e.Error.Message})
		} else {
			msg.Headers.Set(eventstreamapi.MessageTypeHeader, eventstream.StringValue(eventstreamapi.EventMessageType))
			msg.Headers.Set(eventstreamapi.EventTypeHeader, eventstream.StringValue("chunk"))
			msg.Payload, _ = json.Marshal(map[string]string{"bytes": base64.StdEncoding.EncodeToString(data)})
		}
		msg.Headers.Set(eventstreamapi.ContentTypeHeader, eventstream.StringValue("application/json"))
		if err := enc.Encode(w, msg); err != nil {
			return err
		}
		return http.NewResponseController(w).Flush()
	}
}
