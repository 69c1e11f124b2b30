package web

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/sluicehq/sluice/assemble"
	"github.com/sluicehq/sluice/bulk"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/proxy"
	"github.com/sluicehq/sluice/request"
	"github.com/sluicehq/sluice/sim"
)

// browserNames are the names Chromium and Chrome go by on PATH across
// distributions (Debian's chromium, Ubuntu's chromium-browser, Google's
// packages), tried in this order.
var browserNames = []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"}

// findBrowser returns CHROME_PATH when it is set (the variable chromedp and
// Puppeteer users already know), or the first of browserNames on PATH.
func findBrowser() (string, error) {
	if p := os.Getenv("CHROME_PATH"); p != "" {
		if _, err := exec.LookPath(p); err != nil {
			return "", fmt.Errorf("CHROME_PATH=%s: %w", p, err)
		}
		return p, nil
	}
	for _, n := range browserNames {
		if p, err := exec.LookPath(n); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("none of %s on PATH and CHROME_PATH is not set", strings.Join(browserNames, ", "))
}

// browser starts a fresh headless Chromium or Chrome for one test. A
// missing browser fails the test rather than skipping it: CI installs one
// (.ci/run), so it must be there, and a skip would hide the page's tests.
func browser(t *testing.T, w, h int) (context.Context, *consoleErrors) {
	t.Helper()
	chromiumPath, err := findBrowser()
	if err != nil {
		t.Fatalf("no Chromium or Chrome for the browser tests: %v; install one (Debian: apt-get install -y chromium; "+
			"Ubuntu: apt-get install -y chromium-browser) or set CHROME_PATH to its binary", err)
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromiumPath),
		chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(w, h),
	}
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelB := chromedp.NewContext(actx)
	// A bound on a test that fails, not a wait: under go test -race ./...
	// on two cores Chromium's screenshots alone can take seconds, and the
	// bulk test waits for a batch to end.
	ctx, cancelT := context.WithTimeout(ctx, 60*time.Second)
	t.Cleanup(func() { cancelB(); cancelA() })
	ce := &consoleErrors{}
	messages := chromedp.Console(ctx)
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(int64(w), int64(h)), chromedp.Navigate("about:blank")); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for m, err := range messages {
			if err != nil {
				return
			}
			if m.Type == chromedp.ConsoleError || m.Type == chromedp.ConsoleException {
				ce.add(m.String() + " " + m.URL)
			}
		}
	}()
	t.Cleanup(func() { cancelT(); <-done })
	return ctx, ce
}

type consoleErrors struct {
	mu   sync.Mutex
	msgs []string
}

func (c *consoleErrors) add(s string) { c.mu.Lock(); c.msgs = append(c.msgs, s); c.mu.Unlock() }

func (c *consoleErrors) check(t *testing.T) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, m := range c.msgs {
		t.Errorf("browser console: %s", m)
	}
}

// shot saves a full-page screenshot into SLUICE_UI_SHOTS if set (the
// pictures of docs/ui.md), else the test's temporary directory. The
// picture is not what a test checks: Chromium's capture can hang on a page
// that keeps redrawing (chromedp#770, #924; CI met it once on the bulk
// test), so it has its own bound, and without SLUICE_UI_SHOTS a capture
// that fails is logged, not a failure.
func shot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	dir, wanted := os.LookupEnv("SLUICE_UI_SHOTS")
	if !wanted || dir == "" {
		dir = t.TempDir()
	}
	sctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	start := time.Now()
	b, err := chromedp.Run(sctx, chromedp.FullScreenshot(100))
	if err != nil {
		if wanted {
			t.Errorf("screenshot %s: %v after %v", name, err, time.Since(start).Round(time.Millisecond))
		} else {
			t.Logf("screenshot %s not taken (SLUICE_UI_SHOTS is unset; the test's checks passed): %v after %v", name, err, time.Since(start).Round(time.Millisecond))
		}
		return
	}
	if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
		t.Error(err)
	}
}

// stack is a simulator, a windowed sluice in front of it with the live
// view, and the page mounted in front of the proxy, as cmd/sluice does;
// with the bulk endpoint when newBulkStack built it.
type stack struct {
	url  string
	live *Live
	bulk *bulk.Service
}

func newStack(t *testing.T, slots int) *stack {
	t.Helper()
	return newStackWith(t, slots, nil)
}

// newStackWith is newStack with edit applied to sluice's settings.
func newStackWith(t *testing.T, slots int, edit func(*config.Config)) *stack {
	t.Helper()
	return buildStack(t, slots, edit, 0)
}

// newBulkStack is newStack with the bulk endpoint on (a window that closes
// at 5 requests, a store in a temporary directory), before a simulator that takes
// batchDuration over each batch.
func newBulkStack(t *testing.T, batchDuration time.Duration) *stack {
	t.Helper()
	return buildStack(t, 4, nil, batchDuration)
}

func buildStack(t *testing.T, slots int, edit func(*config.Config), batchDuration time.Duration) *stack {
	t.Helper()
	// An input-token limit far above what the tests send: its headers
	// give the live view a bucket to show.
	s := sim.New(sim.Config{TTFT: 150 * time.Millisecond, PerToken: time.Millisecond, Seed: 1, InputTokensPerMinute: 1_000_000,
		BatchDuration: batchDuration})
	simSrv := httptest.NewServer(s)
	cfg := config.Default()
	cfg.Enabled, cfg.MaxConcurrency, cfg.MaxSize = true, slots, 4
	// The live view's test looks for a wave of 4: keep the fixed window,
	// which idle release would close at once while slots are free.
	cfg.IdleRelease = false
	cfg.UpstreamURL, _ = url.Parse(simSrv.URL)
	if edit != nil {
		edit(&cfg)
	}
	st := &stack{live: NewLive(nil)}
	popt := proxy.Options{Observer: st.live, Logger: slog.New(slog.DiscardHandler)}
	wopt := Options{Live: st.live, Logger: slog.New(slog.DiscardHandler), Run: testRun}
	if batchDuration > 0 {
		// The bulk test sends five: its window closes on the fifth, not on
		// a timer that five posts under go test -race on two cores can
		// outlast (they then split into two batches); the long MaxWait is
		// the fallback.
		svc, err := bulk.New(context.Background(), bulk.Config{DataDir: t.TempDir(), MaxWait: 10 * time.Second, MaxRequests: 5,
			PollInterval: 50 * time.Millisecond, Upstream: cfg.UpstreamURL, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		st.bulk, popt.Bulk, wopt.Bulk = svc, svc, svc
	}
	parts, err := assemble.Build(cfg, assemble.Env{Log: popt.Logger})
	if err != nil {
		t.Fatal(err)
	}
	popt.Parts = *parts
	p, err := proxy.New(cfg, popt)
	if err != nil {
		t.Fatal(err)
	}
	st.live.SetGauges(GaugesOf(p, cfg))
	ctx, cancel := context.WithCancel(context.Background())
	wopt.Context = ctx
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	stop := (&proxy.Server{Proxy: p, Handler: Mount(New(wopt), p)}).Start(ln)
	t.Cleanup(func() {
		cancel()
		stop()
		if st.bulk != nil {
			st.bulk.Close()
		}
		simSrv.Close()
		s.Close()
	})
	st.url = "http://" + ln.Addr().String()
	return st
}

func attrInt(t *testing.T, ctx context.Context, sel, attr string) int {
	t.Helper()
	res, err := chromedp.Run(ctx, chromedp.AttributeValue(chromedp.CSS(sel), attr))
	if err != nil {
		t.Fatalf("read %s[%s]: %v", sel, attr, err)
	}
	v := res.Value
	n, err := strconv.ParseFloat(v, 64)
	if !res.Exists || err != nil {
		t.Fatalf("%s[%s] = %q; want a number", sel, attr, v)
	}
	return int(n)
}

func TestPagePlaysTheBurst(t *testing.T) {
	st := newStack(t, 8)
	ctx, console := browser(t, 1280, 800)
	if err := chromedp.Do(ctx,
		chromedp.Navigate(st.url+"/ui/#"+PageBurst),
		chromedp.WaitVisible(chromedp.CSS(`body[data-state="ready"][data-trace="`+PageBurst+`"]`)),
	); err != nil {
		t.Fatal(err)
	}
	cap := attrInt(t, ctx, "#windowed-inflight", "data-cap")
	if cap != DefaultParams.MaxConcurrency {
		t.Fatalf("windowed lane cap %d; want the default trace's %d", cap, DefaultParams.MaxConcurrency)
	}
	if err := chromedp.Do(ctx,
		chromedp.SetValue(chromedp.CSS("#speed"), "2"),
		chromedp.Evaluate[chromedp.Void](`document.getElementById("speed").dispatchEvent(new Event("change")); undefined`),
		chromedp.Click(chromedp.CSS("#play")),
	); err != nil {
		t.Fatal(err)
	}
	maxPlain, maxWin, clock := 0, 0, 0
	for end := time.Now().Add(4 * time.Second); time.Now().Before(end); time.Sleep(25 * time.Millisecond) {
		vals, err := chromedp.Run(ctx, chromedp.Evaluate[[]int](`[+document.getElementById("clock").dataset.ms,
			+document.getElementById("plain-inflight").dataset.inflight,
			+document.getElementById("windowed-inflight").dataset.inflight]`))
		if err != nil {
			t.Fatal(err)
		}
		clock = max(clock, vals[0])
		maxPlain, maxWin = max(maxPlain, vals[1]), max(maxWin, vals[2])
	}
	if clock < 1000 {
		t.Errorf("after 4 s of Play at 2× the clock reads %d ms; want it past 1000", clock)
	}
	if maxPlain <= cap {
		t.Errorf("plain lane in flight peaked at %d while playing; want above the cap %d", maxPlain, cap)
	}
	if maxWin > cap || maxWin < 1 {
		t.Errorf("windowed lane in flight peaked at %d while playing; want 1..%d", maxWin, cap)
	}
	if peak := attrInt(t, ctx, "#windowed-peak", "data-value"); peak > cap {
		t.Errorf("windowed peak figure %d; want <= %d", peak, cap)
	}
	t.Logf("clock %d ms, plain peak %d, windowed peak %d", clock, maxPlain, maxWin)
	// Scrub to a moment mid-burst for the picture.
	if err := chromedp.Do(ctx, chromedp.Evaluate[chromedp.Void](`(() => { const s = document.getElementById("scrub");
		s.value = 150; s.dispatchEvent(new Event("input")); })()`)); err != nil {
		t.Fatal(err)
	}
	shot(t, ctx, "page-1280x800.png")
	console.check(t)
}

func TestPageRerunMovesTheCap(t *testing.T) {
	st := newStack(t, 8)
	ctx, console := browser(t, 1280, 800)
	if err := chromedp.Do(ctx,
		chromedp.Navigate(st.url+"/ui/#"+PageBurst),
		chromedp.WaitVisible(chromedp.CSS(`body[data-state="ready"][data-trace="`+PageBurst+`"]`)),
	); err != nil {
		t.Fatal(err)
	}
	capX0, _ := chromedp.Run(ctx, chromedp.AttributeValue(chromedp.CSS("#lane-windowed"), "data-cap-x"))
	peak0 := attrInt(t, ctx, "#windowed-peak", "data-value")
	if err := chromedp.Do(ctx,
		chromedp.SetValue(chromedp.CSS("#burst"), "24"),
		chromedp.SetValue(chromedp.CSS("#latency_ms"), "80"),
		chromedp.SetValue(chromedp.CSS("#max_concurrency"), "4"),
		chromedp.Click(chromedp.CSS("#run")),
		chromedp.WaitVisible(chromedp.CSS(`#windowed-inflight[data-cap="4"]`)),
		chromedp.WaitVisible(chromedp.CSS(`body[data-state="ready"]`)),
	); err != nil {
		status, _ := chromedp.Run(context.WithoutCancel(ctx), chromedp.Evaluate[string](`document.getElementById("run-status").textContent`))
		t.Fatalf("%v (the page says %q)", err, status)
	}
	capX1, _ := chromedp.Run(ctx, chromedp.AttributeValue(chromedp.CSS("#lane-windowed"), "data-cap-x"))
	if capX1 == capX0 {
		t.Errorf("the windowed lane's cap line stayed at x=%s after the cap went from 8 to 4", capX0.Value)
	}
	peak1 := attrInt(t, ctx, "#windowed-peak", "data-value")
	if peak1 > 4 || peak1 < 1 || peak1 == peak0 {
		t.Errorf("windowed peak %d before, %d after re-running with cap 4; want it to move to 1..4", peak0, peak1)
	}
	if plain := attrInt(t, ctx, "#plain-peak", "data-value"); plain <= 4 {
		t.Errorf("plain peak %d for 24 at once; want above 4", plain)
	}
	console.check(t)
}

// openLive opens the page in ctx and waits until its live feed is watched.
func openLive(t *testing.T, ctx context.Context, st *stack) {
	t.Helper()
	if err := chromedp.Do(ctx,
		chromedp.Navigate(st.url+"/ui/"),
		chromedp.WaitVisible(chromedp.CSS(`#live-status[data-state="open"]`)),
	); err != nil {
		t.Fatal(err)
	}
	for st.live.watchers.Load() == 0 {
		time.Sleep(5 * time.Millisecond)
	}
}

// postMessage sends one Messages body to the stack and reads the answer,
// which must be a 200.
func postMessage(t *testing.T, base, body string) { postAs(t, base+"/v1/messages", body, 200) }

// postAs posts body with the tests' key and reads the answer, which must
// have status want.
func postAs(t *testing.T, u, body string, want int) {
	req, _ := http.NewRequest("POST", u, strings.NewReader(body))
	req.Header.Set("x-api-key", "sk-test")
	req.Header.Set("content-type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Error(err)
		return
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != want {
		t.Errorf("status %d for %.60s: %.200s; want %d", resp.StatusCode, body, b, want)
	}
}

func TestPageShowsLiveWaves(t *testing.T) {
	// The window closes at its 4 requests, not at BATCH_MAX_WAIT_MS's 20
	// ms: under go test -race ./... on two cores the four did not always
	// arrive within 20 ms of each other, and made two waves.
	st := newStackWith(t, 2, func(c *config.Config) { c.MaxWait = 10 * time.Second })
	ctx, console := browser(t, 390, 844)
	openLive(t, ctx, st)
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() {
			postMessage(t, st.url, fmt.Sprintf(`{"model":"claude-sonnet-4-5","max_tokens":16,"messages":[{"role":"user","content":"live %d"}]}`, i))
		})
	}
	wg.Wait()
	// BATCH_MAX_SIZE=4: the four requests are one wave, closed by size.
	if err := chromedp.Do(ctx,
		chromedp.WaitVisible(chromedp.CSS(`#live-waves li[data-wave][data-size="4"][data-reason="size"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#live-requests tr:nth-child(4)`)),
	); err != nil {
		t.Fatalf("the live view did not show the wave of 4: %v", err)
	}
	wa, err := chromedp.Run(ctx, chromedp.AttributeValue(chromedp.CSS(`#live-waves li[data-wave]`), "data-wave"))
	if err != nil {
		t.Fatal(err)
	}
	wave := wa.Value
	waves, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("#live-requests tr")].map(tr => tr.dataset.wave)`))
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range waves {
		if w != wave {
			t.Errorf("a recent request shows wave %s; want %s, the wave of all four", w, wave)
		}
	}
	// The sim's input-token limit came back in the answers' headers:
	// the live view shows the key's bucket.
	if err := chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS(`#live-buckets li[data-limit="input-tokens"][data-key]`))); err != nil {
		t.Fatalf("the live view shows no input-token bucket: %v", err)
	}
	// The tenants table: the one tenant of the four, served four times,
	// named by its key's hash, and each request names it too.
	tenant := request.Tenant(http.Header{"X-Api-Key": {"sk-test"}})
	if err := chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS(`#live-tenants tr[data-tenant="`+tenant+`"]`))); err != nil {
		t.Fatalf("the live view shows no row for the tenant %s: %v", tenant, err)
	}
	cells, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("#live-tenants tr[data-tenant] td")].map(td => td.textContent)`))
	if err != nil {
		t.Fatal(err)
	}
	if len(cells) != 6 || cells[0] != tenant || cells[3] != "4" {
		t.Errorf("tenant row %v; want %s with 4 served", cells, tenant)
	}
	shot(t, ctx, "page-390x844.png")
	console.check(t)
}

// With GATE_LIMIT=adaptive the live view shows the limit now, which
// starts at its ceiling, and says it is adaptive, under which ceiling.
func TestPageShowsAdaptiveLimit(t *testing.T) {
	st := newStackWith(t, 6, func(c *config.Config) { c.GateLimit, c.GateLimitFloor = config.GateLimitAdaptive, 2 })
	ctx, console := browser(t, 1280, 800)
	openLive(t, ctx, st)
	if err := chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS(`#live-gate[data-slots="6"]`))); err != nil {
		t.Fatalf("the live view did not show the adaptive limit's 6 slots: %v", err)
	}
	text, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById("live-gate").textContent`))
	if err != nil {
		t.Fatal(err)
	}
	if want := "0 of 6 slots held (adaptive limit, at most 6)"; text != want {
		t.Errorf("the gate reads %q; want %q", text, want)
	}
	console.check(t)
}

// Four requests on one cached system prompt show in the live view as a
// group: one leader, three followers held for it.
func TestPageShowsLiveCacheGroup(t *testing.T) {
	st := newStack(t, 4)
	ctx, console := browser(t, 1280, 800)
	openLive(t, ctx, st)
	system := strings.Repeat("You are a careful agent; read each file before you edit it. ", 160) // ~2,500 tokens
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() {
			postMessage(t, st.url, fmt.Sprintf(`{"model":"claude-sonnet-4-5","max_tokens":16,"stream":true,`+
				`"system":[{"type":"text","text":%q,"cache_control":{"type":"ephemeral"}}],`+
				`"messages":[{"role":"user","content":"live %d"}]}`, system, i))
		})
	}
	wg.Wait()
	if err := chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS(`#live-requests tr:nth-child(4)`))); err != nil {
		t.Fatalf("the live view did not show the four requests: %v", err)
	}
	roles, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("#live-requests tr")].map(tr => tr.dataset.cache).sort()`))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(roles, ",") != "follower,follower,follower,leader" {
		t.Errorf("the live view shows cache roles %v; want one leader and three followers", roles)
	}
	console.check(t)
}

// Three prompts alike but for their first system block, one after the
// other: the first is new, the other two wrote because system[0] differs,
// and the table says what that cost, the tools before it.
func TestPageShowsCacheWrites(t *testing.T) {
	st := newStack(t, 4)
	ctx, console := browser(t, 1280, 800)
	openLive(t, ctx, st)
	tools := `[{"name":"read_file","description":` + strconv.Quote(strings.Repeat("Read a file of the repository and return its text. ", 120)) + `}]`
	system := strings.Repeat("You are a careful agent; read each file before you edit it. ", 160)
	for i := range 3 {
		postMessage(t, st.url, fmt.Sprintf(`{"model":"claude-sonnet-4-5","max_tokens":16,"tools":%s,`+
			`"system":[{"type":"text","text":"run %d of the fleet"},{"type":"text","text":%q,"cache_control":{"type":"ephemeral"}}],`+
			`"messages":[{"role":"user","content":"go"}]}`, tools, i, system))
	}
	if err := chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS(`#live-cache-writes tr[data-block="system[0]"][data-writes="2"]`))); err != nil {
		t.Fatalf("the live view shows no row for two writes put down to system[0]: %v", err)
	}
	rows, err := chromedp.Run(ctx, chromedp.Evaluate[[][]string](`[...document.querySelectorAll("#live-cache-writes tr[data-block]")].map(tr => [...tr.children].map(td => td.textContent))`))
	if err != nil {
		t.Fatal(err)
	}
	// The tool's ~1,530 tokens, twice: estimated as sluice and the
	// simulator count, four characters a token.
	_, bs, _ := request.ParseBlocks([]byte(`{"model":"claude-sonnet-4-5","tools":`+tools+`}`), nil)
	perWrite := bs[0].Tokens
	want := [][]string{{"system[0]", "2", fmt.Sprintf("%d", 2*perWrite), fmt.Sprintf("%d", perWrite)}, {"new", "1", "0", "0"}}
	if fmt.Sprint(rows) != fmt.Sprint(localized(want)) {
		t.Errorf("cache-write rows %v; want %v", rows, want)
	}
	console.check(t)
}

// localized is rows with their numbers as the page prints them (en, with
// thousands separators).
func localized(rows [][]string) [][]string {
	out := make([][]string, len(rows))
	for i, r := range rows {
		out[i] = append([]string(nil), r...)
		for j := 1; j < len(r); j++ {
			n, _ := strconv.Atoi(r[j])
			if n >= 1000 {
				out[i][j] = fmt.Sprintf("%d,%03d", n/1000, n%1000)
			}
		}
	}
	return out
}
