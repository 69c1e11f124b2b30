package bulk

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// batchesAPI is the upstream's Message Batches API, called with one
// submitter's credential at a time.
type batchesAPI struct {
	base   string // scheme, host and path prefix, no trailing slash
	client *http.Client
}

// credential is a submitter's API key as it was sent: the header and its
// value.
type credential struct {
	header, value string
}

func (c credential) bytes() []byte { return []byte(c.header + "\n" + c.value) }

func parseCredential(b []byte) (credential, error) {
	h, v, ok := strings.Cut(string(b), "\n")
	if !ok {
		return credential{}, errors.New("bulk: a stored credential is malformed")
	}
	return credential{h, v}, nil
}

// counts are a batch's request_counts.
type counts struct {
	Processing int `json:"processing"`
	Succeeded  int `json:"succeeded"`
	Errored    int `json:"errored"`
	Canceled   int `json:"canceled"`
	Expired    int `json:"expired"`
}

func (c counts) total() int { return c.Processing + c.Succeeded + c.Errored + c.Canceled + c.Expired }

// upstreamBatch is the part of a Message Batch object sluice reads.
type upstreamBatch struct {
	ID               string    `json:"id"`
	ProcessingStatus string    `json:"processing_status"`
	RequestCounts    counts    `json:"request_counts"`
	CreatedAt        time.Time `json:"created_at"`
	ResultsURL       string    `json:"results_url"`
}

// apiStatusError is an upstream answer other than 2xx.
type apiStatusError struct {
	status int
	body   []byte
}

func (e *apiStatusError) Error() string {
	return fmt.Sprintf("upstream answered %d: %s", e.status, bytes.TrimSpace(e.body))
}

func (a *batchesAPI) do(ctx context.Context, cred credential, method, path string, body io.Reader) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, a.base+path, body)
	if err != nil {
		return nil, err
	}
	req.Header.Set(cred.header, cred.value)
	req.Header.Set("anthropic-version", "2023-06-01")
	if body != nil {
		req.Header.Set("content-type", "application/json")
	}
	resp, err := a.client.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode/100 != 2 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
		return nil, &apiStatusError{status: resp.StatusCode, body: b}
	}
	return resp, nil
}

func (a *batchesAPI) decode(ctx context.Context, cred credential, method, path string, body io.Reader, v any) error {
	resp, err := a.do(ctx, cred, method, path, body)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(io.LimitReader(resp.Body, 16<<20)).Decode(v); err != nil {
		return fmt.Errorf("decode the upstream's answer: %w", err)
	}
	return nil
}

// create sends a batch whose body write streams; the bodies are read from
// the store as the upload goes.
func (a *batchesAPI) create(ctx context.Context, cred credential, write func(w io.Writer) error) (*upstreamBatch, error) {
	pr, pw := io.Pipe()
	go func() {
		bw := bufio.NewWriterSize(pw, 64<<10)
		err := write(bw)
		if err == nil {
			err = bw.Flush()
		}
		pw.CloseWithError(err)
	}()
	var b upstreamBatch
	err := a.decode(ctx, cred, http.MethodPost, "/v1/messages/batches", pr, &b)
	pr.CloseWithError(errors.New("create finished")) // ends the writer if the upstream stopped reading
	if err != nil {
		return nil, err
	}
	if b.ID == "" {
		return nil, errors.New("the upstream's create answer has no id")
	}
	return &b, nil
}

func (a *batchesAPI) get(ctx context.Context, cred credential, id string) (*upstreamBatch, error) {
	var b upstreamBatch
	return &b, a.decode(ctx, cred, http.MethodGet, "/v1/messages/batches/"+url.PathEscape(id), nil, &b)
}

func (a *batchesAPI) cancel(ctx context.Context, cred credential, id string) error {
	var b upstreamBatch
	return a.decode(ctx, cred, http.MethodPost, "/v1/messages/batches/"+url.PathEscape(id)+"/cancel", nil, &b)
}

// list returns a page of the credential's batches, newest first.
func (a *batchesAPI) list(ctx context.Context, cred credential, afterID string) ([]upstreamBatch, bool, error) {
	q := url.Values{"limit": {"100"}}
	if afterID != "" {
		q.Set("after_id", afterID)
	}
	var page struct {
		Data    []upstreamBatch `json:"data"`
		HasMore bool            `json:"has_more"`
	}
	err := a.decode(ctx, cred, http.MethodGet, "/v1/messages/batches?"+q.Encode(), nil, &page)
	return page.Data, page.HasMore, err
}

// resultLine is one line of a batch's results.
type resultLine struct {
	CustomID string          `json:"custom_id"`
	Result   json.RawMessage `json:"result"`
}

// results streams the batch's results, calling fn per line.
func (a *batchesAPI) results(ctx context.Context, cred credential, id string, fn func(resultLine) error) error {
	resp, err := a.do(ctx, cred, http.MethodGet, "/v1/messages/batches/"+url.PathEscape(id)+"/results", nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 64<<20) // one result is at most a few MB
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		var l resultLine
		if err := json.Unmarshal(line, &l); err != nil {
			return fmt.Errorf("decode a result line: %w", err)
		}
		if err := fn(l); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("read results: %w", err)
	}
	return nil
}
