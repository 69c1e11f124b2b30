package clients

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/assemble"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/price"
	"github.com/sluicehq/sluice/sim"
)

// The multi-turn fleet: real Claude Code agents that each work several
// turns in a small fixture repository, the simulator's replies calling
// Read, Grep and Glob on its files (nothing that runs a command or writes),
// Claude Code running those tools and sending their results back.

// fixtureRepo is the small repository each agent works in (written to
// its working folder): a Go package with a README, the files the
// simulator's tool calls read and search.
var fixtureRepo = map[string]string{
	"README.md": "# wordcount\n\nwordcount counts the words, lines and bytes of its input, as wc does,\n" +
		"and prints the ten most common words with their counts.\n\n## Use\n\n    go run . < file.txt\n\n" +
		"## Layout\n\n- main.go reads standard input and prints the report.\n- count.go holds the counting.\n" +
		"- count_test.go tests it.\n\nWords are split on Unicode white space; case is folded before counting.\n",
	"go.mod": "module example.com/wordcount\n\ngo 1.26\n",
	"main.go": "package main\n\nimport (\n\t\"bufio\"\n\t\"fmt\"\n\t\"os\"\n)\n\n// main prints the counts of standard input.\n" +
		"func main() {\n\tc, err := Count(bufio.NewReader(os.Stdin))\n\tif err != nil {\n\t\tfmt.Fprintln(os.Stderr, err)\n\t\tos.Exit(1)\n\t}\n" +
		"\tfmt.Printf(\"%d lines, %d words, %d bytes\\n\", c.Lines, c.Words, c.Bytes)\n\tfor _, w := range c.Top(10) {\n" +
		"\t\tfmt.Printf(\"%6d %s\\n\", c.Freq[w], w)\n\t}\n}\n",
	"count.go": "package main\n\nimport (\n\t\"bufio\"\n\t\"io\"\n\t\"sort\"\n\t\"strings\"\n\t\"unicode\"\n)\n\n" +
		"// Counts are what Count found.\ntype Counts struct {\n\tLines, Words, Bytes int\n\tFreq map[string]int\n}\n\n" +
		"// Count reads r to its end.\nfunc Count(r *bufio.Reader) (Counts, error) {\n\tc := Counts{Freq: map[string]int{}}\n" +
		"\tfor {\n\t\tline, err := r.ReadString('\\n')\n\t\tc.Bytes += len(line)\n\t\tif strings.HasSuffix(line, \"\\n\") {\n\t\t\tc.Lines++\n\t\t}\n" +
		"\t\tfor _, w := range strings.FieldsFunc(line, unicode.IsSpace) {\n\t\t\tc.Words++\n\t\t\tc.Freq[strings.ToLower(w)]++\n\t\t}\n" +
		"\t\tif err == io.EOF {\n\t\t\treturn c, nil\n\t\t}\n\t\tif err != nil {\n\t\t\treturn c, err\n\t\t}\n\t}\n}\n\n" +
		"// Top is the n most common words, most common first.\nfunc (c Counts) Top(n int) []string {\n\tws := make([]string, 0, len(c.Freq))\n" +
		"\tfor w := range c.Freq {\n\t\tws = append(ws, w)\n\t}\n\tsort.Slice(ws, func(i, j int) bool {\n\t\tif c.Freq[ws[i]] != c.Freq[ws[j]] {\n" +
		"\t\t\treturn c.Freq[ws[i]] > c.Freq[ws[j]]\n\t\t}\n\t\treturn ws[i] < ws[j]\n\t})\n\treturn ws[:min(n, len(ws))]\n}\n",
	"count_test.go": "package main\n\nimport (\n\t\"bufio\"\n\t\"strings\"\n\t\"testing\"\n)\n\n" +
		"func TestCount(t *testing.T) {\n\tc, err := Count(bufio.NewReader(strings.NewReader(\"a b\\nb c\\n\")))\n" +
		"\tif err != nil || c.Lines != 2 || c.Words != 4 || c.Freq[\"b\"] != 2 {\n\t\tt.Fatalf(\"Count = %+v, %v\", c, err)\n\t}\n}\n",
}

// fleetTurnTasks are the agents' tasks: different, as a real fleet's.
var fleetTurnTasks = []string{
	"Explain what this repository does.",
	"Find where words are counted and say how.",
	"Check whether the tests cover Top.",
	"Say how case is handled when counting.",
	"List the Go files and what each holds.",
	"Find how ties between equal counts are ordered.",
	"Say what main prints.",
	"Find the module path.",
	"Say how bytes are counted.",
	"Find what happens on a read error.",
	"Say which packages count.go imports.",
	"Describe the Counts type.",
	"Say how lines are counted.",
	"Find what the README says about splitting words.",
	"Say what Top returns for n larger than the word count.",
	"Find the test's input and expected counts.",
}

// The tools the simulator's replies call, one per turn in this order, with
// the inputs they take: all read-only, all inside the working folder.
const fleetToolNames = "Read,Grep,Glob,Read,Grep"

var fleetToolInputs = map[string][]json.RawMessage{
	"Read": {json.RawMessage(`{"file_path":"README.md"}`), json.RawMessage(`{"file_path":"count.go"}`)},
	"Grep": {json.RawMessage(`{"pattern":"func ","output_mode":"content"}`)},
	"Glob": {json.RawMessage(`{"pattern":"**/*.go"}`)},
}

// Claude Code's tools for the fleet: the three the simulator calls are
// allowed without asking; everything that runs a command, writes, or
// starts another agent is denied (and so not offered).
const (
	fleetAllowedTools    = "Read,Glob,Grep"
	fleetDisallowedTools = "Bash,Write,Edit,NotebookEdit,Agent,Workflow,ScheduleWakeup,Skill,ListAgents,ReportFindings,WebFetch,WebSearch"
)

// fleetTurnsConfig is one size of the multi-turn fleet.
type fleetTurnsConfig struct {
	agents   int           // Claude Code processes
	toolUses int           // tool calls per agent: toolUses+1 requests each
	stagger  time.Duration // between the starts of staggered agents
}

// fleetSize is the fleet the test runs: a bounded one for CI, or the
// full one with SLUICE_FLEET_FULL=1 (docs/claude-code.md).
func fleetSize() fleetTurnsConfig {
	if os.Getenv("SLUICE_FLEET_FULL") != "" {
		return fleetTurnsConfig{agents: 16, toolUses: 5, stagger: 750 * time.Millisecond}
	}
	return fleetTurnsConfig{agents: 8, toolUses: 3, stagger: 750 * time.Millisecond}
}

// exchange is one Messages request as a journal saw it.
type exchange struct {
	Session string        `json:"session"`
	Turn    int           `json:"turn"` // tool results in the request: 0 for an agent's first
	At      time.Duration `json:"at"`   // arrival, since the run began
	TTFB    time.Duration `json:"ttfb"` // until the response's first bytes
	Dur     time.Duration `json:"dur"`  // until its end
	Status  int           `json:"status"`
	Model   string        `json:"model"`
	Bytes   int           `json:"bytes"` // the request body
	Usage   struct {
		Input         int64 `json:"input_tokens"`
		CacheCreation int64 `json:"cache_creation_input_tokens"`
		CacheRead     int64 `json:"cache_read_input_tokens"`
		Output        int64 `json:"output_tokens"`
	} `json:"usage"`
}

// inputCost is what the request's input cost at list prices.
func (e exchange) inputCost() float64 {
	c := price.Default().Cost(e.Model, price.UsageOf(e.Usage.Input, e.Usage.Output, e.Usage.CacheCreation, 0, e.Usage.CacheRead), false)
	return c.Total() - c.USD[price.Output]
}

// journal wraps a handler and notes every POST /v1/messages it serves:
// whose session (X-Claude-Code-Session-Id), which turn, when, how long,
// and the model and usage the reply named. With a starting gate, every
// agent's first request waits at it before it is passed on.
type journal struct {
	next  http.Handler
	start time.Time
	gate  *startingGate
	mu    sync.Mutex
	ex    []exchange
}

// startingGate sets the fleet's arrival pattern at sluice's door: it
// holds the agents' first requests until all of them have come (Claude
// Code takes from 2 s on a quiet machine to minutes on a loaded one to
// send its first request, so the processes' start times do not make an
// arrival pattern), then lets them through together, or one every
// stagger. Later turns pass at once: they follow from the replies.
type startingGate struct {
	mu      sync.Mutex
	want    int
	came    int
	stagger time.Duration
	all     chan struct{} // closed when the last first request has come
	opened  time.Time
}

func newStartingGate(agents int, stagger time.Duration) *startingGate {
	return &startingGate{want: agents, stagger: stagger, all: make(chan struct{})}
}

// wait holds a first request until its turn to pass: with the others
// (stagger 0), or the k'th to come k staggers after the gate opened.
// An agent that never comes does not hold the others past two minutes.
func (g *startingGate) wait(ctx context.Context) {
	g.mu.Lock()
	k := g.came
	g.came++
	if g.came == g.want {
		g.opened = time.Now()
		close(g.all)
	}
	g.mu.Unlock()
	select {
	case <-g.all:
	case <-time.After(2 * time.Minute):
		return
	case <-ctx.Done():
		return
	}
	select {
	case <-time.After(time.Until(g.opened.Add(time.Duration(k) * g.stagger))):
	case <-ctx.Done():
	}
}

func newJournal(next http.Handler, start time.Time) *journal {
	return &journal{next: next, start: start}
}

func (j *journal) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/v1/messages" {
		j.next.ServeHTTP(w, r)
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	turn := bytes.Count(body, []byte(`"type":"tool_result"`))
	if j.gate != nil && turn == 0 {
		j.gate.wait(r.Context())
	}
	e := exchange{Session: r.Header.Get("X-Claude-Code-Session-Id"), At: time.Since(j.start), Bytes: len(body), Turn: turn}
	tw := &teeWriter{ResponseWriter: w, began: time.Now()}
	j.next.ServeHTTP(tw, r)
	e.TTFB, e.Dur, e.Status = tw.ttfb, time.Since(tw.began), tw.status
	if e.Status == 0 {
		e.Status = http.StatusOK
	}
	e.Model, e.Usage.Input, e.Usage.CacheCreation, e.Usage.CacheRead, e.Usage.Output = replyUsage(tw.buf.Bytes())
	j.mu.Lock()
	j.ex = append(j.ex, e)
	j.mu.Unlock()
}

func (j *journal) exchanges() []exchange {
	j.mu.Lock()
	defer j.mu.Unlock()
	return slices.Clone(j.ex)
}

// teeWriter keeps a copy of a response (up to 4 MB) and when it began.
type teeWriter struct {
	http.ResponseWriter
	began  time.Time
	ttfb   time.Duration
	status int
	buf    bytes.Buffer
}

func (t *teeWriter) WriteHeader(code int) {
	if t.status == 0 {
		t.status = code
	}
	t.ResponseWriter.WriteHeader(code)
}

func (t *teeWriter) Write(p []byte) (int, error) {
	if t.ttfb == 0 {
		t.ttfb = time.Since(t.began)
	}
	if t.status == 0 {
		t.status = http.StatusOK
	}
	if t.buf.Len() < 4<<20 {
		t.buf.Write(p)
	}
	return t.ResponseWriter.Write(p)
}

func (t *teeWriter) Flush() { _ = http.NewResponseController(t.ResponseWriter).Flush() }

func (t *teeWriter) Unwrap() http.ResponseWriter { return t.ResponseWriter }

// replyUsage reads the model and usage of a Messages reply, streamed
// (message_start's, then message_delta's output tokens) or whole.
func replyUsage(b []byte) (model string, in, write, read, out int64) {
	type usage struct {
		Input  int64 `json:"input_tokens"`
		Write  int64 `json:"cache_creation_input_tokens"`
		Read   int64 `json:"cache_read_input_tokens"`
		Output int64 `json:"output_tokens"`
	}
	var whole struct {
		Type    string `json:"type"`
		Model   string `json:"model"`
		Usage   usage  `json:"usage"`
		Message struct {
			Model string `json:"model"`
			Usage usage  `json:"usage"`
		} `json:"message"`
	}
	if json.Unmarshal(b, &whole) == nil && whole.Type == "message" {
		u := whole.Usage
		return whole.Model, u.Input, u.Write, u.Read, u.Output
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		whole.Type = ""
		if json.Unmarshal([]byte(data), &whole) != nil {
			continue
		}
		switch whole.Type {
		case "message_start":
			u := whole.Message.Usage
			model, in, write, read, out = whole.Message.Model, u.Input, u.Write, u.Read, u.Output
		case "message_delta":
			out = max(out, whole.Usage.Output)
		}
	}
	return model, in, write, read, out
}

// agentOutcome is how one Claude Code process ended.
type agentOutcome struct {
	Task    string
	Session string
	Exit    int
	Subtype string
	IsError bool
	Turns   int
	Models  []string // the models its result says answered
	Result  string
	Err     error
	Output  string
}

// runAgent runs one Claude Code agent in its own HOME and a copy of the
// fixture repository, up to maxTurns turns, tools limited as above.
func runAgent(ctx context.Context, bin, base, task string, maxTurns int) agentOutcome {
	o := agentOutcome{Task: task, Exit: -1}
	home, err := os.MkdirTemp("", "sluice-claude-fleet-")
	if err != nil {
		o.Err = err
		return o
	}
	defer os.RemoveAll(home)
	work := filepath.Join(home, "work")
	for name, text := range fixtureRepo {
		if err := os.MkdirAll(work, 0o755); err == nil {
			err = os.WriteFile(filepath.Join(work, name), []byte(text), 0o644)
		}
		if err != nil {
			o.Err = err
			return o
		}
	}
	cmd := exec.CommandContext(ctx, bin, "-p", task, "--output-format", "json", "--max-turns", fmt.Sprint(maxTurns),
		"--allowedTools", fleetAllowedTools, "--disallowedTools", fleetDisallowedTools)
	cmd.Dir = work
	cmd.Env = claudeEnv(home, base)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	o.Output = string(out) + stderr.String()
	var ee *exec.ExitError
	switch {
	case err == nil:
		o.Exit = 0
	case errors.As(err, &ee):
		o.Exit = ee.ExitCode()
	default:
		o.Err = err
		return o
	}
	var res struct {
		Subtype    string                     `json:"subtype"`
		IsError    bool                       `json:"is_error"`
		NumTurns   int                        `json:"num_turns"`
		Result     string                     `json:"result"`
		SessionID  string                     `json:"session_id"`
		ModelUsage map[string]json.RawMessage `json:"modelUsage"`
	}
	if err := json.Unmarshal(out, &res); err != nil {
		o.Err = fmt.Errorf("its output is not its JSON result: %v", err)
		return o
	}
	o.Subtype, o.IsError, o.Turns, o.Result, o.Session = res.Subtype, res.IsError, res.NumTurns, res.Result, res.SessionID
	for m := range res.ModelUsage {
		o.Models = append(o.Models, m)
	}
	sort.Strings(o.Models)
	return o
}

// fleetTurnsRun is what one run of the multi-turn fleet measured.
type fleetTurnsRun struct {
	mode, arrival string
	upstream      []exchange // what reached the simulator
	front         []exchange // what the agents saw at sluice's door
	agents        []agentOutcome
	metrics       string
	wall          time.Duration
}

// runFleetTurns runs the fleet once: a simulator whose replies call the
// fleet's tools, sluice in front (defaults, windowed or plain), a
// journal on each side of it, and the agents started together or
// staggered.
func runFleetTurns(t *testing.T, bin string, fc fleetTurnsConfig, windowed, staggered bool) fleetTurnsRun {
	t.Helper()
	run := fleetTurnsRun{mode: map[bool]string{true: "windowed", false: "plain"}[windowed],
		arrival: map[bool]string{true: "staggered", false: "together"}[staggered]}
	scfg := sim.DefaultConfig()
	scfg.ToolUseShare, scfg.ToolUseMax = 1, fc.toolUses
	scfg.ToolUseName, scfg.ToolUseInput = fleetToolNames, fleetToolInputs
	scfg.PerToken, scfg.OutputTokensMax = 5*time.Millisecond, 96 // short replies: the turns, not the typing, are measured
	start := time.Now()
	s := sim.New(scfg)
	back := newJournal(s, start)
	up := httptest.NewServer(back)
	t.Cleanup(func() { up.Close(); s.Close() })
	cfg := config.Default()
	cfg.Enabled = windowed
	cfg.UpstreamURL, _ = url.Parse(up.URL)
	base := serveStack(t, cfg, assemble.Env{})
	target, _ := url.Parse(base)
	front := newJournal(&httputil.ReverseProxy{
		Rewrite:       func(r *httputil.ProxyRequest) { r.SetURL(target) },
		FlushInterval: -1,
	}, start)
	front.gate = newStartingGate(fc.agents, 0)
	if staggered {
		front.gate.stagger = fc.stagger
	}
	door := httptest.NewServer(front)
	t.Cleanup(door.Close)

	// Bounded generously: on a quiet 2-core machine a run takes seconds,
	// on one shared with heavy builds (load 60) minutes.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	run.agents = make([]agentOutcome, fc.agents)
	var wg sync.WaitGroup
	for i := range fc.agents {
		wg.Go(func() {
			run.agents[i] = runAgent(ctx, bin, door.URL, fleetTurnTasks[i%len(fleetTurnTasks)], fc.toolUses+2)
		})
	}
	wg.Wait()
	run.wall = time.Since(start)
	run.upstream, run.front = back.exchanges(), front.exchanges()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	m, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	run.metrics = string(m)
	return run
}

// turnFigures sums exchanges: tokens, input cost and latency percentiles.
type turnFigures struct {
	requests           int
	write, read, input int64
	cost               float64
	p50, p99, ttfbP50  time.Duration
	statuses, sessions map[string]int
}

func figuresOf(ex []exchange) turnFigures {
	f := turnFigures{statuses: map[string]int{}, sessions: map[string]int{}}
	var durs, ttfbs []time.Duration
	for _, e := range ex {
		f.requests++
		f.write += e.Usage.CacheCreation
		f.read += e.Usage.CacheRead
		f.input += e.Usage.Input
		if e.Status == http.StatusOK {
			f.cost += e.inputCost()
		}
		f.statuses[fmt.Sprint(e.Status)]++
		f.sessions[e.Session]++
		durs = append(durs, e.Dur)
		ttfbs = append(ttfbs, e.TTFB)
	}
	f.p50, f.p99, f.ttfbP50 = percentile(durs, 0.50), percentile(durs, 0.99), percentile(ttfbs, 0.50)
	return f
}

// percentile is the nearest-rank percentile of ds.
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(float64(len(s))*p+0.999999) - 1
	return s[min(max(i, 0), len(s)-1)]
}

// byTurn splits exchanges by turn.
func byTurn(ex []exchange) map[int][]exchange {
	m := map[int][]exchange{}
	for _, e := range ex {
		m[e.Turn] = append(m[e.Turn], e)
	}
	return m
}

// report logs a run's figures per turn and in all (tokens and cost from
// the simulator's side, latency from the agents' side of sluice) and
// every agent's outcome.
func (run fleetTurnsRun) report(t *testing.T) {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "%s, %s: %d agents, wall %.1f s; roles leader %d, follower %d, warm %d\n", run.arrival, run.mode, len(run.agents), run.wall.Seconds(),
		counter(run.metrics, `sluice_cache_requests_total{role="leader"}`), counter(run.metrics, `sluice_cache_requests_total{role="follower"}`),
		counter(run.metrics, `sluice_cache_requests_total{role="warm"}`))
	fmt.Fprintf(&b, "| turn | requests | cache writes | cache reads | uncached input | input cost | p50 / p99 (at sluice's door) | TTFB p50 |\n")
	up, front := byTurn(run.upstream), byTurn(run.front)
	turns := make([]int, 0, len(up))
	for k := range up {
		turns = append(turns, k)
	}
	sort.Ints(turns)
	row := func(name string, u, f []exchange) {
		fu, ff := figuresOf(u), figuresOf(f)
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %d | $%.4f | %d / %d ms | %d ms |\n", name, fu.requests, fu.write, fu.read, fu.input, fu.cost,
			ff.p50.Milliseconds(), ff.p99.Milliseconds(), ff.ttfbP50.Milliseconds())
	}
	for _, k := range turns {
		row(fmt.Sprint(k+1), up[k], front[k])
	}
	row("all", run.upstream, run.front)
	for i, a := range run.agents {
		fmt.Fprintf(&b, "agent %d: exit %d, %s, is_error %v, %d turns, models %v, session %s, result %.40q\n", i, a.Exit, a.Subtype, a.IsError, a.Turns, a.Models, a.Session, a.Result)
	}
	t.Log(b.String())
	if dir := os.Getenv("SLUICE_FLEET_OUT"); dir != "" {
		out, _ := json.MarshalIndent(map[string]any{"mode": run.mode, "arrival": run.arrival, "upstream": run.upstream, "front": run.front}, "", " ")
		if err := os.WriteFile(filepath.Join(dir, "fleet-"+run.arrival+"-"+run.mode+".json"), out, 0o644); err != nil {
			t.Error(err)
		}
	}
}

// check fails the test unless every agent ended well and its every turn
// reached the simulator.
func (run fleetTurnsRun) check(t *testing.T, fc fleetTurnsConfig) {
	t.Helper()
	perSession := map[string][]int{}
	for _, e := range run.upstream {
		perSession[e.Session] = append(perSession[e.Session], e.Turn)
	}
	for i, a := range run.agents {
		if a.Err != nil || a.Exit != 0 || a.Subtype != "success" || a.IsError {
			t.Errorf("%s, %s: agent %d (%q): exit %d, %s, is_error %v, err %v\n%.1500s", run.arrival, run.mode, i, a.Task, a.Exit, a.Subtype, a.IsError, a.Err, a.Output)
			continue
		}
		turns := perSession[a.Session]
		slices.Sort(turns)
		want := make([]int, fc.toolUses+1)
		for k := range want {
			want[k] = k
		}
		if !slices.Equal(turns, want) {
			t.Errorf("%s, %s: agent %d's session %s reached the simulator with turns %v; want %v (one request per turn)", run.arrival, run.mode, i, a.Session, turns, want)
		}
	}
}

// TestClaudeCodeFleetTurns runs real Claude Code agents for several turns
// each, every turn a tool call (Read, Grep, Glob of a fixture
// repository) and its result, their first requests let through together
// or one every 750 ms (the starting gate), through
// windowed sluice at its defaults and through the plain path, each run
// to a fresh simulator. It logs per turn and in all the cache writes and
// reads, input cost and latency, and every agent's outcome; and it fails
// unless every agent succeeds with one request per turn, and unless the
// fleet started together writes fewer cache tokens through windowed
// sluice than through the plain path. SLUICE_FLEET_FULL=1 runs the
// larger fleet docs/claude-code.md's figures come from; SLUICE_FLEET_OUT
// names a folder for every request's figures as JSON.
func TestClaudeCodeFleetTurns(t *testing.T) {
	requireClients(t)
	bin := claudeBinary(t)
	fc := fleetSize()
	for _, staggered := range []bool{false, true} {
		t.Run(map[bool]string{true: "staggered", false: "together"}[staggered], func(t *testing.T) {
			t.Parallel()
			win := runFleetTurns(t, bin, fc, true, staggered)
			win.report(t)
			win.check(t, fc)
			plain := runFleetTurns(t, bin, fc, false, staggered)
			plain.report(t)
			plain.check(t, fc)
			w, p := figuresOf(win.upstream), figuresOf(plain.upstream)
			t.Logf("%s: whole run cache writes windowed %d, plain %d (%.2fx); input cost $%.4f vs $%.4f (%.2fx)", win.arrival,
				w.write, p.write, float64(w.write)/float64(max(p.write, 1)), w.cost, p.cost, w.cost/max(p.cost, 1e-9))
			if !staggered && (p.write == 0 || w.write >= p.write) {
				t.Errorf("together: whole run cache writes windowed %d, plain %d; want windowed below plain", w.write, p.write)
			}
		})
	}
}
