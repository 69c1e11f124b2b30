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
	"sync/atomic"
	"time"
)

// ChildEnv names the environment variable that makes a sluice-bench
// process one of the benchmark's children instead of what its arguments
// say: the variable holds the child's spec as JSON. The benchmark runs its
// own executable for each child, so that the upstream and the load generator
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
	// Long paces each stream (Stream must be set): the upstream is told
	// the pace in the request (longBody).
	Long *Pace `json:"long,omitempty"`
	// Metrics is a sluice's /metrics, whose go_goroutines is sampled with
	// the RSS of PIDs[0]; empty: none.
	Metrics string `json:"metrics,omitempty"`
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

// longMark opens the metadata.user_id of a long stream's request; the
// pace follows it (see longBody).
const longMark = "overhead-long:"

// longBody is a streaming request whose answer the upstream paces as p
// says: "overhead-long:<burst>:<bursts>:<pause in ms>" in its
// metadata.user_id, a field the API takes and the proxies relay as is.
func longBody(p *Pace) string {
	return fmt.Sprintf(`{"model":"claude-sonnet-4-5","max_tokens":4096,"stream":true,"metadata":{"user_id":"%s%d:%d:%d"},"messages":[{"role":"user","content":"Think, then answer"}]}`,
		longMark, p.Burst, p.Bursts, p.Pause.Milliseconds())
}

// longPace reads the pace of a long stream from its request's body, if
// it is one.
func longPace(body []byte) (*Pace, bool) {
	_, rest, ok := bytes.Cut(body, []byte(longMark))
	if !ok {
		return nil, false
	}
	var p Pace
	var ms int64
	if n, _ := fmt.Sscanf(string(rest), "%d:%d:%d", &p.Burst, &p.Bursts, &ms); n != 3 || p.Burst < 1 || p.Bursts < 1 || ms < 0 {
		return nil, false
	}
	p.Pause = time.Duration(ms) * time.Millisecond
	return &p, true
}

// longDelta is a long stream's text delta, as a model's token or two.
const longDelta = "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\" token\"}}\n\n"

// writeLong streams a long answer paced as p says: the answer's opening
// events, the bursts of deltas with a pause between each two, and its
// closing events; every event flushed on its own.
func writeLong(w http.ResponseWriter, r *http.Request, p *Pace) {
	f := w.(http.Flusher)
	send := func(ev string) {
		io.WriteString(w, ev)
		f.Flush()
	}
	send(streamEvents[0])
	send(streamEvents[1])
	for b := range p.Bursts {
		if b > 0 {
			select {
			case <-time.After(p.Pause):
			case <-r.Context().Done():
				return
			}
		}
		for range p.Burst {
			send(longDelta)
		}
	}
	for _, ev := range streamEvents[len(streamEvents)-3:] {
		send(ev)
	}
}

// upstreamHandler answers POST /v1/messages at once: the stream when the
// body asks for one, paced when it asks for a long one (longBody), else
// the Message; each event is flushed as the API does.
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
	if p, ok := longPace(body); ok {
		writeLong(w, r, p)
		return
	}
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
	// With Long: PIDs[0]'s RSS and (from Metrics) goroutines before any
	// client started, and in the middle of the span with Open streams
	// open (sent and not yet read to their end).
	RSSIdleKB        int64   `json:"rss_idle_kb,omitempty"`
	RSSLoadedKB      int64   `json:"rss_loaded_kb,omitempty"`
	GoroutinesIdle   float64 `json:"goroutines_idle,omitempty"`
	GoroutinesLoaded float64 `json:"goroutines_loaded,omitempty"`
	Open             int64   `json:"open,omitempty"`
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
	want := int64(len(streamEvents))
	if sp.Stream {
		body = `{"model":"claude-sonnet-4-5","max_tokens":64,"stream":true,"messages":[{"role":"user","content":"Hello, Claude"}]}`
	}
	if sp.Long != nil {
		body, want = longBody(sp.Long), int64(sp.Long.events())
		client.Timeout = 0 // a long stream outlasts any fixed bound; the run's own bounds it
	}
	var idle sample
	if sp.Long != nil {
		idle = takeSample(sp)
	}
	var open atomic.Int64
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
				open.Add(1)
				ttfe, events, err := once(client, sp.URL, body, sp.Stream, want, start)
				open.Add(-1)
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
	var loaded sample
	var openThen int64
	if sp.Long != nil {
		time.Sleep(sp.Duration / 2)
		openThen = open.Load()
		loaded = takeSample(sp)
	}
	time.Sleep(time.Until(end))
	cpu1 := sampleCPU(sp.PIDs)
	wg.Wait()

	res := &loadResult{Seconds: sp.Duration.Seconds(), CPU: make([]float64, len(sp.PIDs)),
		RSSIdleKB: idle.rssKB, RSSLoadedKB: loaded.rssKB, GoroutinesIdle: idle.goroutines, GoroutinesLoaded: loaded.goroutines, Open: openThen}
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
func once(c *http.Client, url, body string, stream bool, want int64, start time.Time) (ttfe time.Duration, events int64, err error) {
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
	if events != want {
		return 0, 0, fmt.Errorf("stream of %d events, want %d", events, want)
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

// sample is a proxy's memory and goroutines at one moment.
type sample struct {
	rssKB      int64   // PIDs[0]'s VmRSS; 0 when there is none
	goroutines float64 // go_goroutines from Metrics; 0 when there is none
}

func takeSample(sp childSpec) sample {
	var s sample
	if len(sp.PIDs) > 0 {
		s.rssKB = rssKB(sp.PIDs[0])
	}
	if sp.Metrics != "" {
		s.goroutines = goroutines(sp.Metrics)
	}
	return s
}

// goroutines is go_goroutines from a Prometheus text page; 0 if it cannot
// be read.
func goroutines(url string) float64 {
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "go_goroutines "); ok {
			var n float64
			fmt.Sscan(v, &n)
			return n
		}
	}
	return 0
}
