package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/apierror"
)

// bulkPollWait is each long poll's wait; the server bounds it at 60 s.
const bulkPollWait = 30 * time.Second

// bulkAttempt is mode bulk's attempt: it submits the request to
// POST /v1/bulk/messages (with an Idempotency-Key, so a retried submission
// is the same request) and, once it is accepted, long-polls
// GET /v1/bulk/messages/{id}?wait=30s until it has ended. out.FirstByte
// is the 202; out.OK and out.ErrorType come from the stored result. Only
// the submission is retried: once accepted, the request is the server's to
// finish.
func (c *client) bulkAttempt(ctx context.Context, id, attempt int, a Arrival, body []byte, out *Outcome) (http.Header, bool) {
	*out = Outcome{Retries: out.Retries}
	sctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(sctx, http.MethodPost, c.base+"/v1/bulk/messages", bytes.NewReader(body))
	if err != nil {
		out.Lost, out.ErrorType = true, "bad_request_build"
		return nil, false
	}
	c.setHeaders(req, a, attempt)
	req.Header.Set("Idempotency-Key", fmt.Sprintf("bench-%d", id))
	resp, err := c.http.Do(req)
	if err != nil {
		c.failTransport(ctx, sctx, out, err)
		return nil, true
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	out.Status = resp.StatusCode
	if err != nil {
		c.failTransport(ctx, sctx, out, err)
		return resp.Header, true
	}
	if resp.StatusCode != http.StatusAccepted {
		if e, ok := apierror.Decode(b); ok {
			out.ErrorType = e.Error.Type
		} else {
			out.Lost, out.ErrorType = true, fmt.Sprintf("non_anthropic_%d", resp.StatusCode)
		}
		return resp.Header, c.policy.shouldRetry(resp.Header, resp.StatusCode)
	}
	out.FirstByte = time.Now()
	var m bulkMessage
	if json.Unmarshal(b, &m) != nil || m.ID == "" {
		out.Lost, out.ErrorType = true, "malformed_response"
		return resp.Header, false
	}
	for m.Status != "ended" {
		if ctx.Err() != nil {
			out.Lost, out.ErrorType = true, "aborted"
			return nil, false
		}
		if m, err = c.bulkPoll(ctx, m.ID, a); err != nil {
			out.Lost, out.ErrorType = true, err.Error()
			return nil, false
		}
	}
	switch m.Result.Type {
	case "succeeded":
		out.OK = true
		out.CacheWrite, out.CacheRead = m.Result.Message.Usage.Write, m.Result.Message.Usage.Read
	case "errored":
		out.ErrorType = "bulk_errored"
		if m.Result.Error.Error.Type != "" {
			out.ErrorType += "_" + m.Result.Error.Error.Type
		}
	default:
		out.ErrorType = "bulk_" + m.Result.Type // canceled or expired
	}
	return nil, false
}

// bulkMessage is the part of a bulk request object the bench reads.
type bulkMessage struct {
	ID     string `json:"id"`
	Status string `json:"status"`
	Result struct {
		Type    string `json:"type"`
		Message struct {
			Usage cacheUsage `json:"usage"`
		} `json:"message"`
		Error apierror.Body `json:"error"`
	} `json:"result"`
}

// bulkPoll is one long poll of request id.
func (c *client) bulkPoll(ctx context.Context, id string, a Arrival) (bulkMessage, error) {
	var m bulkMessage
	pctx, cancel := context.WithTimeout(ctx, bulkPollWait+10*time.Second)
	defer cancel()
	u := c.base + "/v1/bulk/messages/" + id + "?wait=" + bulkPollWait.String()
	req, err := http.NewRequestWithContext(pctx, http.MethodGet, u, nil)
	if err != nil {
		return m, err
	}
	c.setHeaders(req, a, 0)
	resp, err := c.http.Do(req)
	if err != nil {
		return m, fmt.Errorf("bulk_poll_connection_error")
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return m, fmt.Errorf("bulk_poll_%d", resp.StatusCode)
	}
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
		return m, fmt.Errorf("bulk_poll_malformed")
	}
	return m, nil
}

// setHeaders sets the headers an SDK sends on every call, with the
// scenario's key (the tenant's, in a tenants workload).
func (c *client) setHeaders(req *http.Request, a Arrival, attempt int) {
	req.Header.Set("Content-Type", "application/json")
	if a.Tenant != "" {
		req.Header.Set("X-Api-Key", "sk-bench-"+a.Tenant)
	} else {
		req.Header.Set("X-Api-Key", "sk-bench")
	}
	req.Header.Set("Anthropic-Version", "2023-06-01")
	req.Header.Set("X-Stainless-Retry-Count", strconv.Itoa(attempt))
}
