package overhead

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"
)

// ChildEnv names the environment variable that makes a sluice process one
// of the benchmark's children instead of what its arguments say: the
// variable holds the child's spec as JSON. The benchmark runs its own
// executable for each child, so that the upstream and the load generator
// are processes of their own whose CPU is not the proxy's.
const ChildEnv = "SLUICE_OVERHEAD_CHILD"

// childSpec is what a child is told: its role, and for the load generator
// what to send.
type childSpec struct {
	Role     string        `json:"role"`           // upstream, go-proxy or load
	URL      string        `json:"url,omitempty"`  // the load's target, the go-proxy's upstream
	Pool     int           `json:"pool,omitempty"` // the go-proxy's idle connections per host: BATCH_MAX_CONCURRENCY, as sluice's
	Clients  int           `json:"clients,omitempty"`
	Warmup   time.Duration `json:"warmup,omitempty"`
	Duration time.Duration `json:"duration,omitempty"`
	Stream   bool          `json:"stream,omitempty"`
	PIDs     []int         `json:"pids,omitempty"` // whose CPU to sample over the measured span
}

// RunChild runs the child that the ChildEnv variable describes, writing
// its answer to stdout; it returns whether the variable was set at all.
func RunChild(stdout io.Writer) (bool, error) {
	v, ok := os.LookupEnv(ChildEnv)
	if !ok {
		return false, nil
	}
	var sp childSpec
	if err := json.Unmarshal([]byte(v), &sp); err != nil {
		return true, fmt.Errorf("%s: %w", ChildEnv, err)
	}
	switch sp.Role {
	case "upstream":
		return true, serveUpstream(stdout)
	case GoProxy:
		return true, serveGoProxy(stdout, sp)
	case "load":
		res, err := generate(sp)
		if err != nil {
			return true, err
		}
		return true, json.NewEncoder(stdout).Encode(res)
	}
	return true, fmt.Errorf("%s: unknown role %q", ChildEnv, sp.Role)
}

// The instant upstream's answers: a Message as the API sends it, and a
// short stream of the API's events (streamEvents of them).
const messageJSON = `{"id":"msg_overhead","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[{"type":"text","text":"Hello! How can I help you today?"}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":12,"output_tokens":10}}`

var streamEvents = []string{
	"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_overhead\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"claude-sonnet-4-5\",\"content\":[],\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":12,\"output_tokens\":1}}}\n\n",
	"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n",
	"event: ping\ndata: {\"type\": \"ping\"}\n\n",
	"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hello!\"}}\n\n",
	"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\" How can\"}}\n\n",
	"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\" I help\"}}\n\n",
	"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\" you today?\"}}\n\n",
	"event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n",
	"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":10}}\n\n",
	"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
}

// upstreamHandler answers POST /v1/messages at once: the stream when the
// body asks for one, else the Message; each event is flushed as the API
// does.
func upstreamHandler(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	h := w.Header()
	h.Set("Request-Id", "req_overhead")
	if !bytes.Contains(body, []byte(`"stream":true`)) {
		h.Set("Content-Type", "application/json")
		io.WriteString(w, messageJSON)
		return
	}
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	f := w.(http.Flusher)
	for _, ev := range streamEvents {
		io.WriteString(w, ev)
		f.Flush()
	}
}

// serveUpstream serves the instant upstream on a free loopback port,
// writes its address as one line, and serves until it is signalled.
func serveUpstream(stdout io.Writer) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, ln.Addr().String())
	srv := &http.Server{Handler: http.HandlerFunc(upstreamHandler), ReadHeaderTimeout: 10 * time.Second}
	return srv.Serve(ln)
}

// loadResult is what the load generator measured over its measured span.
type loadResult struct {
	Requests int64   `json:"requests"` // answered in full, begun within the span
	Errors   int64   `json:"errors"`
	FirstErr string  `json:"first_error,omitempty"`
	Events   int64   `json:"events"`  // SSE data lines received
	Seconds  float64 `json:"seconds"` // the measured span
	P50      float64 `json:"p50_ms"`  // whole answer
	P99      float64 `json:"p99_ms"`
	TTFE50   float64 `json:"ttfe_p50_ms,omitempty"` // first SSE event
	TTFE99   float64 `json:"ttfe_p99_ms,omitempty"`
	// CPU is each sampled process's CPU seconds (user + system) over the
	// span, in the order of childSpec.PIDs.
	CPU []float64 `json:"cpu_s"`
}

// clientRecord is one client's requests that began within the span.
type clientRecord struct {
	lat, ttfe []time.Duration
	events    int64
	errs      int64
	firstErr  string
}

// generate runs sp.Clients clients, each sending one request after the
// other over its own keep-alive connection, for sp.Warmup unrecorded and
// then sp.Duration recorded; it samples the CPU of sp.PIDs at the start
// and the end of the recorded span.
func generate(sp childSpec) (*loadResult, error) {
	if sp.Clients < 1 || sp.Duration <= 0 {
		return nil, errors.New("load: clients and duration must be positive")
	}
	tr := &http.Transport{MaxIdleConnsPerHost: sp.Clients, DisableCompression: true, IdleConnTimeout: time.Minute}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	body := `{"model":"claude-sonnet-4-5","max_tokens":64,"messages":[{"role":"user","content":"Hello, Claude"}]}`
	if sp.Stream {
		body = `{"model":"claude-sonnet-4-5","max_tokens":64,"stream":true,"messages":[{"role":"user","content":"Hello, Claude"}]}`
	}
	begin := time.Now().Add(sp.Warmup)
	end := begin.Add(sp.Duration)
	recs := make([]clientRecord, sp.Clients)
	var wg sync.WaitGroup
	for i := range recs {
		rec := &recs[i]
		wg.Go(func() {
			for {
				start := time.Now()
				if !start.Before(end) {
					return
				}
				ttfe, events, err := once(client, sp.URL, body, sp.Stream, start)
				if start.Before(begin) {
					continue
				}
				if err != nil {
					if rec.errs == 0 {
						rec.firstErr = err.Error()
					}
					rec.errs++
					time.Sleep(time.Millisecond) // a refusing target must not spin the machine
					continue
				}
				rec.lat = append(rec.lat, time.Since(start))
				if sp.Stream {
					rec.ttfe = append(rec.ttfe, ttfe)
					rec.events += events
				}
			}
		})
	}
	time.Sleep(time.Until(begin))
	cpu0 := sampleCPU(sp.PIDs)
	time.Sleep(time.Until(end))
	cpu1 := sampleCPU(sp.PIDs)
	wg.Wait()

	res := &loadResult{Seconds: sp.Duration.Seconds(), CPU: make([]float64, len(sp.PIDs))}
	for i := range res.CPU {
		res.CPU[i] = cpu1[i] - cpu0[i]
	}
	var lat, ttfe []time.Duration
	for _, r := range recs {
		lat, ttfe = append(lat, r.lat...), append(ttfe, r.ttfe...)
		res.Events += r.events
		res.Errors += r.errs
		if res.FirstErr == "" {
			res.FirstErr = r.firstErr
		}
	}
	res.Requests = int64(len(lat))
	res.P50, res.P99 = quantileMS(lat, 0.50), quantileMS(lat, 0.99)
	if sp.Stream {
		res.TTFE50, res.TTFE99 = quantileMS(ttfe, 0.50), quantileMS(ttfe, 0.99)
	}
	return res, nil
}

// once sends one request and reads its whole answer: for a stream, the
// time to its first event and the number of events.
func once(c *http.Client, url, body string, stream bool, start time.Time) (ttfe time.Duration, events int64, err error) {
	req, err := http.NewRequest(http.MethodPost, url+"/v1/messages", strings.NewReader(body))
	if err != nil {
		return 0, 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Api-Key", "sk-ant-overhead")
	req.Header.Set("Anthropic-Version", "2023-06-01")
	resp, err := c.Do(req)
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 300))
		return 0, 0, fmt.Errorf("status %d: %s", resp.StatusCode, b)
	}
	if !stream {
		_, err = io.Copy(io.Discard, resp.Body)
		return 0, 0, err
	}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if bytes.HasPrefix(sc.Bytes(), []byte("data:")) {
			if events == 0 {
				ttfe = time.Since(start)
			}
			events++
		}
	}
	if err := sc.Err(); err != nil {
		return 0, 0, err
	}
	if events != int64(len(streamEvents)) {
		return 0, 0, fmt.Errorf("stream of %d events, want %d", events, len(streamEvents))
	}
	return ttfe, events, nil
}

// quantileMS is the q-quantile of d in milliseconds (nearest rank); 0
// for none.
func quantileMS(d []time.Duration, q float64) float64 {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	i := int(q*float64(len(d))+0.5) - 1
	i = max(0, min(i, len(d)-1))
	return float64(d[i]) / float64(time.Millisecond)
}
