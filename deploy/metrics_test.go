package deploy

import (
	"bufio"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/assemble"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/proxy"
)

// served is what one scrape of /metrics serves: each metric family's name
// and type, and the label names its series carry.
type served struct {
	types  map[string]string          // family name -> counter, gauge, histogram...
	labels map[string]map[string]bool // family name -> label names seen
}

// family maps a series name to its family: a histogram's _bucket, _sum and
// _count series belong to the histogram's name.
func (s served) family(name string) (string, bool) {
	if _, ok := s.types[name]; ok {
		return name, true
	}
	for _, suf := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suf); ok {
			if typ := s.types[base]; typ == "histogram" || typ == "summary" {
				return base, true
			}
		}
	}
	return "", false
}

// scrapeRealProxy starts what `sluice serve` runs, windowed, in front of an
// upstream whose first answer is a 529 and whose next are 200s with usage,
// sends one request (retried once), so that the labelled series (requests
// by status, retries by cause, tokens by model, flushes by reason, upstream
// duration by stream) exist, and returns one scrape of /metrics.
func scrapeRealProxy(t *testing.T) served {
	t.Helper()
	var calls atomic.Int32
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		if calls.Add(1) == 1 {
			w.Header().Set("Retry-After-Ms", "1")
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(529)
			io.WriteString(w, `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id":"msg_1","type":"message","role":"assistant","model":"claude-sonnet-4-5",`+
			`"content":[{"type":"text","text":"hi"}],"stop_reason":"end_turn","stop_sequence":null,`+
			`"usage":{"input_tokens":3,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":1}}`)
	}))
	t.Cleanup(up.Close)
	cfg := config.Default()
	cfg.Enabled = true
	cfg.UpstreamURL, _ = url.Parse(up.URL)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + ln.Addr().String()
	parts, err := assemble.Build(cfg, assemble.Env{Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	p, err := proxy.New(cfg, proxy.Options{Logger: slog.New(slog.DiscardHandler), Parts: *parts})
	if err != nil {
		t.Fatal(err)
	}
	stop := (&proxy.Server{Proxy: p, Log: slog.New(slog.DiscardHandler)}).Start(ln)
	t.Cleanup(func() { stop() })

	client := &http.Client{Timeout: 10 * time.Second}
	req, _ := http.NewRequest("POST", base+"/v1/messages",
		strings.NewReader(`{"model":"claude-sonnet-4-5","max_tokens":16,"messages":[{"role":"user","content":"hi"}]}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Api-Key", "sk-test")
	req.Header.Set("Anthropic-Version", "2023-06-01")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || calls.Load() != 2 {
		t.Fatalf("the request: status %d after %d upstream calls, want 200 after a retry", resp.StatusCode, calls.Load())
	}

	resp, err = client.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	s := served{types: map[string]string{}, labels: map[string]map[string]bool{}}
	sample := regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? `)
	labelName := regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="(?:[^"\\]|\\.)*"`)
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if f := strings.Fields(line); len(f) == 4 && f[0] == "#" && f[1] == "TYPE" {
			s.types[f[2]] = f[3]
			continue
		}
		m := sample.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		fam, ok := s.family(m[1])
		if !ok {
			t.Fatalf("/metrics serves %s with no # TYPE line before it", m[1])
		}
		if s.labels[fam] == nil {
			s.labels[fam] = map[string]bool{}
		}
		for _, l := range labelName.FindAllStringSubmatch(m[2], -1) {
			s.labels[fam][l[1]] = true
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return s
}

var (
	promString   = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)
	promSelector = regexp.MustCompile(`([a-zA-Z_:][a-zA-Z0-9_:]*)\s*\{([^}]*)\}`)
	promMatcher  = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)`)
	promGrouping = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	promRange    = regexp.MustCompile(`\[[^\]]*\]`)
	promIdent    = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*(\s*\()?`)
	promKeywords = []string{"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring", "group_left", "group_right", "inf", "nan"}
)

// metricsIn returns the metric names a PromQL expression selects, each
// with the label names its matchers use. It is no PromQL parser, but
// enough for expressions like these: strings, ranges and grouping clauses
// are removed, a name followed by "(" is a function or an aggregation, and
// what is left that is no keyword is a metric.
func metricsIn(expr string) map[string][]string {
	out := map[string][]string{}
	e := promString.ReplaceAllString(expr, `""`)
	e = promGrouping.ReplaceAllString(e, " ")
	for _, m := range promSelector.FindAllStringSubmatch(e, -1) {
		for _, l := range promMatcher.FindAllStringSubmatch(m[2], -1) {
			out[m[1]] = append(out[m[1]], l[1])
		}
	}
	e = regexp.MustCompile(`\{[^}]*\}`).ReplaceAllString(e, " ")
	e = promRange.ReplaceAllString(e, " ")
	for _, m := range promIdent.FindAllStringSubmatch(e, -1) {
		name := strings.TrimSpace(strings.TrimSuffix(m[0], m[1]))
		if m[1] != "" || slices.Contains(promKeywords, strings.ToLower(name)) {
			continue
		}
		if _, ok := out[name]; !ok {
			out[name] = nil
		}
	}
	return out
}

func TestMetricsInReadsSelectors(t *testing.T) {
	got := metricsIn(`sum by (status, mode) (rate(sluice_requests_total{instance=~"$instance", route=~"a|b"}[$__rate_interval])) / on (job) sluice_x > bool 0.8 * sluice_y`)
	want := map[string][]string{"sluice_requests_total": {"instance", "route"}, "sluice_x": nil, "sluice_y": nil}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for k, v := range want {
		if !slices.Equal(got[k], v) {
			t.Errorf("%s: labels %v, want %v", k, got[k], v)
		}
	}
}

// checkNames fails for each metric an expression names that /metrics does
// not serve, and for each label a matcher uses that its series lack
// (instance and job are added by Prometheus at scrape time).
func checkNames(t *testing.T, s served, where, expr string) {
	t.Helper()
	names := metricsIn(expr)
	if len(names) == 0 {
		t.Errorf("%s: found no metric in %q", where, expr)
	}
	for name, labels := range names {
		fam, ok := s.family(name)
		if !ok {
			t.Errorf("%s: %s is not served by /metrics (in %q)", where, name, expr)
			continue
		}
		for _, l := range labels {
			if l != "instance" && l != "job" && l != "le" && !s.labels[fam][l] {
				t.Errorf("%s: %s has no label %q", where, name, l)
			}
		}
	}
}

func TestDeployFilesNameOnlyServedMetrics(t *testing.T) {
	s := scrapeRealProxy(t)
	for _, r := range readRules(t) {
		checkNames(t, s, "alert "+r.Alert, r.Expr)
	}

	b, err := os.ReadFile("grafana/sluice.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		SchemaVersion int `json:"schemaVersion"`
		Panels        []struct {
			Title      string `json:"title"`
			Datasource struct {
				UID string `json:"uid"`
			} `json:"datasource"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Name  string          `json:"name"`
				Type  string          `json:"type"`
				Query json.RawMessage `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("grafana/sluice.json: %v", err)
	}
	if dash.SchemaVersion < 39 {
		t.Errorf("schemaVersion %d: older than Grafana 11's", dash.SchemaVersion)
	}
	hasDS := false
	for _, v := range dash.Templating.List {
		switch v.Type {
		case "datasource":
			hasDS = v.Name == "datasource" && string(v.Query) == `"prometheus"`
		case "query":
			var q struct{ Query string }
			if err := json.Unmarshal(v.Query, &q); err != nil {
				t.Fatalf("variable %s: %v", v.Name, err)
			}
			// label_values(metric, label): the metric must be served with
			// the label, or the variable offers nothing to pick.
			m := regexp.MustCompile(`^label_values\(\s*([^,]+?)\s*,\s*(\w+)\s*\)$`).FindStringSubmatch(q.Query)
			if m == nil {
				t.Errorf("variable %s: query %q is not label_values(metric, label)", v.Name, q.Query)
				continue
			}
			checkNames(t, s, "variable "+v.Name, m[1])
		}
	}
	if !hasDS {
		t.Error("no Prometheus datasource variable named datasource")
	}
	queries := 0
	for _, p := range dash.Panels {
		if p.Datasource.UID != "${datasource}" {
			t.Errorf("panel %q: datasource %q, want the ${datasource} variable", p.Title, p.Datasource.UID)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q: no query", p.Title)
		}
		for _, q := range p.Targets {
			queries++
			checkNames(t, s, "panel "+strconv.Quote(p.Title), q.Expr)
		}
	}
	if queries < 20 {
		t.Errorf("read %d panel queries; the dashboard has more", queries)
	}
}
