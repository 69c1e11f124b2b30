package web

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path"
	"slices"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/bench"
)

// mustScenarioTrace reads the shipped trace of name, strictly.
func mustScenarioTrace(t *testing.T, name string) (*ScenarioTrace, []byte) {
	t.Helper()
	b, err := static.ReadFile(path.Join(traceDir, name+".json"))
	if err != nil {
		t.Fatalf("%s: %v (regenerate the traces with `go generate ./web`)", name, err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var tr ScenarioTrace
	if err := dec.Decode(&tr); err != nil {
		t.Fatalf("%s no longer parses (regenerate it with `go generate ./web`): %v", name, err)
	}
	return &tr, b
}

// The default trace still shows what the page says it shows: the
// windowed path serves a larger share with fewer upstream calls per
// success than plain.
func TestDefaultScenarioShowsThePromise(t *testing.T) {
	tr, _ := mustScenarioTrace(t, DefaultScenario)
	var plain, win *bench.ModeReport
	for _, l := range tr.Lanes {
		var m bench.ModeReport
		if err := json.Unmarshal(l.Figures, &m); err != nil {
			t.Fatalf("%s: %s's figures: %v", DefaultScenario, l.Mode, err)
		}
		switch l.Mode {
		case bench.ModePlain:
			plain = &m
		case bench.ModeWindowed:
			win = &m
		}
	}
	if plain == nil || win == nil {
		t.Fatalf("%s has no plain and windowed lanes", DefaultScenario)
	}
	perSuccess := func(m *bench.ModeReport) float64 { return float64(m.UpstreamCalls) / float64(max(m.Succeeded, 1)) }
	if win.Succeeded <= plain.Succeeded || perSuccess(win) >= perSuccess(plain) || win.Upstream529 >= plain.Upstream529 {
		t.Errorf("%s: windowed served %d with %.2f calls a success and %d 529s, plain %d with %.2f and %d; the page says windowed serves more with less",
			DefaultScenario, win.Succeeded, perSuccess(win), win.Upstream529, plain.Succeeded, perSuccess(plain), plain.Upstream529)
	}
	if why := whyDefault(tr); !strings.Contains(why, "served") {
		t.Errorf("the reason shown for the default is %q", why)
	}
}

func getBody(t *testing.T, u string) (*http.Response, []byte) {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}

// The picker's list names every shipped trace and the default; each is
// served as it is embedded; any other name is a 404 of the API's shape,
// never a file outside the traces.
func TestTraceEndpoints(t *testing.T) {
	srv := httptest.NewServer(New(Options{}))
	defer srv.Close()
	resp, b := getBody(t, srv.URL+"/ui/api/traces")
	var list TraceList
	if err := json.Unmarshal(b, &list); resp.StatusCode != 200 || err != nil {
		t.Fatalf("GET /ui/api/traces: %d %v %.200s", resp.StatusCode, err, b)
	}
	if list.Default != DefaultScenario || list.Why == "" {
		t.Errorf("default %q, why %q; want %s with a reason", list.Default, list.Why, DefaultScenario)
	}
	var got []string
	for _, ti := range list.Traces {
		got = append(got, ti.Name)
		resp, b := getBody(t, srv.URL+"/ui/api/traces/"+ti.Name)
		want, err := static.ReadFile(path.Join(traceDir, ti.Name+".json"))
		if ti.Name == PageBurst {
			want, err = static.ReadFile("static/trace-default.json")
		}
		if err != nil || resp.StatusCode != 200 || !bytes.Equal(b, want) || ti.Bytes != len(want) {
			t.Errorf("GET %s: %d, %d bytes (listed %d); want 200 and the %d embedded bytes", ti.Name, resp.StatusCode, len(b), ti.Bytes, len(want))
		}
		if ti.Name != PageBurst && ti.Verdict == "" {
			t.Errorf("%s is listed without its verdict line", ti.Name)
		}
	}
	want := append(bench.SuiteScenarios(), PageBurst)
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("listed %v; want the suite's scenarios and %s: %v", got, PageBurst, want)
	}
	for _, bad := range []string{"nope", "..%2F..%2Fweb.go", "%2e%2e", "overload.json", "a/b", "..%2Ftrace-default"} {
		resp, b := getBody(t, srv.URL+"/ui/api/traces/"+bad)
		var e struct {
			Type  string `json:"type"`
			Error struct{ Type, Message string }
		}
		if err := json.Unmarshal(b, &e); resp.StatusCode != 404 || err != nil || e.Type != "error" || e.Error.Type != "not_found_error" {
			t.Errorf("GET /ui/api/traces/%s: %d %.200s; want 404 not_found_error", bad, resp.StatusCode, b)
		}
		if bytes.Contains(b, []byte("package web")) {
			t.Errorf("GET /ui/api/traces/%s served a source file", bad)
		}
	}
}
