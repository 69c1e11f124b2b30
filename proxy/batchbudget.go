package proxy

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"

	"github.com/sluicehq/sluice/apierror"
	"github.com/sluicehq/sluice/budget"
	"github.com/sluicehq/sluice/price"
	"github.com/sluicehq/sluice/request"
	"github.com/sluicehq/sluice/spend"
)

// A Message Batch spends as Messages requests do, at half the price, hours
// later. With budgets, a batch create is refused when its estimated cost
// does not fit in what its tenant's and key's budgets have left; an
// accepted one holds that estimate against them (budget.Reserve) until
// its results are read through sluice, when each succeeded result's usage
// is counted in the spend ledger at the batch price and the hold is given
// back.

// batchHold is what one accepted batch holds against the budgets, by
// tenant and key: a batch's requests may name tenants of their own
// (TENANT_FROM=metadata).
type batchHold struct {
	groups []batchGroup
	// group is each request's group by its custom_id, when there is
	// more than one group.
	group map[string]int
}

type batchGroup struct {
	tenant, key string
	// member is who sent the batch as group budgets see them: its
	// results are counted under tenant, so their own budgets of their
	// groups' budgets hold it too.
	member budget.Member
	est    budget.Estimate
	res    *budget.Reservation
}

func (h *batchHold) release() {
	for _, g := range h.groups {
		g.res.Release()
	}
}

// batchHolds are the holds of the batches created through this sluice and
// whose results have not been read yet, by batch id.
type batchHolds struct {
	mu sync.Mutex
	m  map[string]*batchHold
}

func (b *batchHolds) put(id string, h *batchHold) {
	b.mu.Lock()
	if b.m == nil {
		b.m = map[string]*batchHold{}
	}
	b.m[id] = h
	b.mu.Unlock()
}

// take removes and returns the hold of batch id, nil if there is none:
// one reading of its results counts them.
func (b *batchHolds) take(id string) *batchHold {
	b.mu.Lock()
	defer b.mu.Unlock()
	h := b.m[id]
	delete(b.m, id)
	return h
}

// relayBatchCreate is POST /v1/messages/batches under budgets: the body
// is read (under BODY_BUDGET_MB, as checkModels reads it), its cost
// estimated and held, and the request relayed unchanged; the hold is kept
// under the batch's id if the upstream accepted it, else given back.
func (p *Proxy) relayBatchCreate(w http.ResponseWriter, r *http.Request) {
	if !p.pendingConns.take(p.cfg.MaxPendingConns) {
		p.metrics.Shed.Inc()
		apierror.WriteSluice(w, closing(w, errTooManyPending))
		return
	}
	body, aerr := readBody(w, r, maxBatchesBody, p.batchBodyTimeout, p.bodies)
	p.pendingConns.give()
	if aerr != nil {
		if aerr != errClientGone {
			apierror.WriteSluice(w, aerr)
		}
		return
	}
	defer p.bodies.release(body.reserved)
	hold, aerr := p.holdBatch(r, body.data)
	if aerr != nil {
		apierror.WriteSluice(w, aerr)
		return
	}
	r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(body.data)), int64(len(body.data))
	if hold == nil {
		p.relayTo(w, r)
		return
	}
	cw := &createWriter{ResponseWriter: w}
	p.relayTo(cw, r)
	var created struct {
		ID string `json:"id"`
	}
	if cw.status == http.StatusOK && json.Unmarshal(cw.body.Bytes(), &created) == nil && created.ID != "" {
		p.batchHolds.put(created.ID, hold)
		return
	}
	hold.release() // not created: nothing will be spent
}

// holdBatch reserves the estimated cost of a batch create's requests
// against their budgets: each request's prompt and max_tokens, as the
// pacing estimates it, at the batch price. It is nil when no budget binds
// them (or the body is not a batch: the upstream refuses it), or the 402
// to answer with when one does not fit, holding nothing then.
func (p *Proxy) holdBatch(r *http.Request, body []byte) (*batchHold, *apierror.Error) {
	var b struct {
		Requests []struct {
			CustomID string          `json:"custom_id"`
			Params   json.RawMessage `json:"params"`
		} `json:"requests"`
	}
	if json.Unmarshal(body, &b) != nil {
		return nil, nil
	}
	prices := p.spend.Prices()
	in := inboundOf(r)
	h := &batchHold{}
	index := map[[2]string]int{}
	ids := make([]int, len(b.Requests))
	for i, rq := range b.Requests {
		d, _ := request.Parse(rq.Params, r.Header)
		d.Inbound = in
		d.Tenant, _ = p.tenants.Identify(d, r.Header)
		k := [2]string{d.Tenant, budget.KeyOf(&d)}
		g, ok := index[k]
		if !ok {
			g = len(h.groups)
			index[k] = g
			h.groups = append(h.groups, batchGroup{tenant: k[0], key: k[1], member: budget.MemberOf(&d)})
		}
		ids[i] = g
		input, output := int64(d.Cost.InputTokens), int64(d.Cost.MaxTokens)
		h.groups[g].est.USD += prices.Cost(d.Model, price.UsageOf(input, output, 0, 0, 0), true).Total()
		h.groups[g].est.Tokens += float64(input + output)
	}
	held := false
	for i := range h.groups {
		g := &h.groups[i]
		res, aerr := p.budgets.Reserve(g.tenant, g.key, g.member, g.est)
		if aerr != nil {
			h.release()
			return nil, aerr
		}
		g.res = res
		held = held || res != nil
	}
	if !held {
		return nil, nil
	}
	if len(h.groups) > 1 {
		h.group = make(map[string]int, len(ids))
		for i, rq := range b.Requests {
			h.group[rq.CustomID] = ids[i]
		}
	}
	return h, nil
}

// createWriter keeps a batch create's status and its answer (a batch
// object, a few hundred bytes), to read the new batch's id.
type createWriter struct {
	http.ResponseWriter
	status int
	body   bytes.Buffer
}

func (c *createWriter) WriteHeader(code int) {
	if c.status == 0 {
		c.status = code
	}
	c.ResponseWriter.WriteHeader(code)
}

func (c *createWriter) Write(b []byte) (int, error) {
	if c.status == 0 {
		c.status = http.StatusOK
	}
	if c.body.Len() < maxCreateAnswer {
		c.body.Write(b[:min(len(b), maxCreateAnswer-c.body.Len())])
	}
	return c.ResponseWriter.Write(b)
}

func (c *createWriter) Unwrap() http.ResponseWriter { return c.ResponseWriter }

// maxCreateAnswer bounds what createWriter keeps of an answer.
const maxCreateAnswer = 64 << 10

// countsResults reports whether r reads the results of a batch that holds
// a budget's estimate: they are counted as they are relayed.
func (p *Proxy) countsResults(r *http.Request) bool {
	if p.budgets == nil {
		return false
	}
	id, ok := batchResultsID(r)
	if !ok {
		return false
	}
	p.batchHolds.mu.Lock()
	defer p.batchHolds.mu.Unlock()
	return p.batchHolds.m[id] != nil
}

// batchResultsID is the batch id of a GET of a batch's results.
func batchResultsID(r *http.Request) (string, bool) {
	if r.Method != http.MethodGet {
		return "", false
	}
	rest, ok := strings.CutPrefix(r.URL.Path, "/v1/messages/batches/")
	if !ok {
		return "", false
	}
	id, ok := strings.CutSuffix(rest, "/results")
	return id, ok && id != "" && !strings.Contains(id, "/")
}

// resultsCounter counts a batch's results as they are relayed: each
// succeeded result's usage, at the batch price, under the tenant and key
// that held its estimate; finish gives the holds back.
type resultsCounter struct {
	io.ReadCloser
	p    *Proxy
	hold *batchHold
	line []byte // the unfinished line
	skip bool   // the unfinished line is past maxResultLine: not counted
}

// maxResultLine bounds one results line kept to be counted.
const maxResultLine = 32 << 20

func (c *resultsCounter) Read(b []byte) (int, error) {
	n, err := c.ReadCloser.Read(b)
	data := b[:n]
	for len(data) > 0 {
		i := bytes.IndexByte(data, '\n')
		if i < 0 {
			c.keep(data)
			break
		}
		c.keep(data[:i])
		c.count()
		data = data[i+1:]
	}
	if err == io.EOF {
		c.count()
		c.hold.release() // all counted: at once, not once the client has gone
	}
	return n, err
}

func (c *resultsCounter) keep(b []byte) {
	if c.skip || len(c.line)+len(b) > maxResultLine {
		c.skip, c.line = true, c.line[:0]
		return
	}
	c.line = append(c.line, b...)
}

// count counts the line kept, and starts the next.
func (c *resultsCounter) count() {
	line, skip := c.line, c.skip
	c.line, c.skip = c.line[:0], false
	if skip || len(bytes.TrimSpace(line)) == 0 {
		return
	}
	var l struct {
		CustomID string `json:"custom_id"`
		Result   struct {
			Type    string          `json:"type"`
			Message json.RawMessage `json:"message"`
		} `json:"result"`
	}
	if json.Unmarshal(line, &l) != nil || l.Result.Type != "succeeded" {
		return
	}
	model, u, ok := request.ParseAnswer(l.Result.Message)
	if !ok {
		return
	}
	g := c.hold.groups[0]
	if c.hold.group != nil {
		g = c.hold.groups[c.hold.group[l.CustomID]]
	}
	c.p.spend.Add(spend.Key{Tenant: g.tenant, Inbound: g.key, Model: model},
		price.UsageOf(price.Count(u.Input), price.Count(u.Output), price.Count(u.CacheWrite), price.Count(u.CacheWrite1h), price.Count(u.CacheRead)), true, false)
}
