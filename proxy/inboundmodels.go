package proxy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/sluicehq/sluice/apierror"
	"github.com/sluicehq/sluice/request"
)

// checkModels enforces a key's model list on the relayed paths that name
// a model: count_tokens and a batch create (whose bodies it reads, under
// BODY_BUDGET_MB, and hands on), and GET /v1/models/{id}. POST
// /v1/messages is checked where its body is read (messages). A key with a
// model list may not POST to a path whose model sluice cannot tell. On
// success the caller calls release once the request is over.
func (p *Proxy) checkModels(w http.ResponseWriter, r *http.Request, rec *request.Inbound) (release func(), _ *apierror.Error) {
	nothing := func() {}
	path := r.URL.Path
	if id, ok := strings.CutPrefix(path, "/v1/models/"); ok && r.Method == http.MethodGet {
		if !allowsModel(rec, id) {
			return nil, errModelNotAllowed(rec, id)
		}
		return nothing, nil
	}
	if r.Method == http.MethodGet || r.Method == http.MethodHead || r.Method == http.MethodDelete || r.Method == http.MethodOptions {
		return nothing, nil
	}
	var batch bool
	switch {
	case path == "/v1/messages":
		return nothing, nil // messages checks the descriptor's model
	case path == "/v1/messages/count_tokens":
	case path == "/v1/messages/batches":
		batch = true
	case strings.HasPrefix(path, "/v1/messages/batches/") && strings.HasSuffix(path, "/cancel"):
		return nothing, nil // names a batch, not a model
	default:
		return nil, &apierror.Error{Status: http.StatusForbidden, Type: "permission_error",
			Message: fmt.Sprintf("%s may call only some models, and sluice cannot tell which model %s %s calls; use /v1/messages, or ask whoever runs this sluice for a key without a model list", holder(rec), r.Method, path)}
	}
	limit, timeout := int64(maxMessagesBody), p.bodyTimeout
	if batch {
		limit, timeout = maxBatchesBody, p.batchBodyTimeout
	}
	if !p.pendingConns.take(p.cfg.MaxPendingConns) {
		p.metrics.Shed.Inc()
		return nil, closing(w, errTooManyPending)
	}
	body, aerr := readBody(w, r, limit, timeout, p.bodies)
	p.pendingConns.give()
	if aerr != nil {
		return nil, aerr
	}
	release = func() { p.bodies.release(body.reserved) }
	models, err := modelsOf(body.data, batch)
	if err != nil {
		release()
		return nil, errBadJSON(err.Error())
	}
	for _, m := range models {
		if !allowsModel(rec, m) {
			release()
			return nil, errModelNotAllowed(rec, m)
		}
	}
	r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(body.data)), int64(len(body.data))
	return release, nil
}

// modelsOf is the model a count_tokens body names, or every model a batch
// create's requests name.
func modelsOf(body []byte, batch bool) ([]string, error) {
	if !batch {
		m, err := exactString(body, "model")
		return []string{m}, err
	}
	raw, err := exactMember(body, "requests")
	if err != nil {
		return nil, err
	}
	var requests []json.RawMessage
	if raw != nil {
		if err := json.Unmarshal(raw, &requests); err != nil {
			return nil, err
		}
	}
	models := make([]string, len(requests))
	for i, rq := range requests {
		params, err := exactMember(rq, "params")
		if err != nil {
			return nil, err
		}
		if params != nil {
			if models[i], err = exactString(params, "model"); err != nil {
				return nil, err
			}
		}
	}
	return models, nil
}

// errAmbiguousMember refuses an object with a member whose name differs
// from one sluice checks only in case: encoding/json would match it, and
// an upstream that matches names exactly would read the other one, so the
// check and the call could disagree on the model.
var errAmbiguousMember = errors.New("a member name differs from a known one only in case")

// exactMember is the value of obj's member called name, matched exactly
// (the last, if it repeats); nil when there is none.
func exactMember(obj []byte, name string) (json.RawMessage, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(obj, &m); err != nil {
		return nil, err
	}
	for k := range m {
		if k != name && strings.EqualFold(k, name) {
			return nil, errAmbiguousMember
		}
	}
	return m[name], nil
}

// exactString is obj's member name as a string; "" when absent or null.
func exactString(obj []byte, name string) (string, error) {
	raw, err := exactMember(obj, name)
	if err != nil || raw == nil {
		return "", err
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", err
	}
	return s, nil
}
