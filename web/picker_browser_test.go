package web

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"

	"github.com/chromedp/chromedp"
)

// pageView is what the replay shows, read from the page in one go.
type pageView struct {
	Verdict  string `json:"verdict"`
	Why      string `json:"why"`
	ColourBy string `json:"colourBy"`
	Lanes    []struct {
		Mode    string         `json:"mode"`
		Drawn   int            `json:"drawn"`
		Colours map[string]int `json:"colours"`
	} `json:"lanes"`
	Legend         []string `json:"legend"`
	TenantRows     int      `json:"tenantRows"`
	BucketVisible  bool     `json:"bucketVisible"`
	BucketLines    int      `json:"bucketLines"`
	BucketCapacity int      `json:"bucketCapacity"`
	Overflow       int      `json:"overflow"`
}

const readView = `(() => ({
  verdict: document.getElementById("verdict").textContent,
  why: document.getElementById("trace-why").hidden ? "" : document.getElementById("trace-why").textContent,
  colourBy: document.getElementById("colour-by").value,
  lanes: [...document.querySelectorAll("#lanes figure.lane")].map((f) => { const c = f.querySelector("canvas");
    return { mode: f.dataset.mode, drawn: +c.dataset.drawn, colours: JSON.parse(c.dataset.colours || "{}") }; }),
  legend: [...document.querySelectorAll("#legend li")].map((li) => li.dataset.role || (li.dataset.tenant ? "tenant:" + li.dataset.tenant : "")),
  tenantRows: document.getElementById("tenants-wrap").hidden ? 0 : document.querySelectorAll("#tenants-body tr").length,
  bucketVisible: !document.getElementById("bucket-fig").hidden,
  bucketLines: +document.getElementById("chart-bucket").dataset.lines,
  bucketCapacity: +document.getElementById("chart-bucket").dataset.capacity,
  overflow: Math.max(document.documentElement.scrollWidth, document.body.scrollWidth) - window.innerWidth,
}))()`

// pick chooses name in the picker, waits for its trace to be drawn, and
// moves the clock to frac of the replay.
func pick(t *testing.T, ctx context.Context, name string, frac float64) pageView {
	t.Helper()
	if err := chromedp.Do(ctx,
		chromedp.Evaluate[chromedp.Void](fmt.Sprintf(`(() => { const s = document.getElementById("trace-pick"); s.value = %q; s.dispatchEvent(new Event("change")); })()`, name)),
		chromedp.WaitVisible(chromedp.CSS(`body[data-state="ready"][data-trace="`+name+`"]`)),
	); err != nil {
		t.Fatalf("pick %s: %v", name, err)
	}
	return scrubTo(t, ctx, frac)
}

func scrubTo(t *testing.T, ctx context.Context, frac float64) pageView {
	t.Helper()
	if err := chromedp.Do(ctx, chromedp.Evaluate[chromedp.Void](fmt.Sprintf(
		`(() => { const s = document.getElementById("scrub"); s.value = %d; s.dispatchEvent(new Event("input")); })()`, int(frac*1000)))); err != nil {
		t.Fatal(err)
	}
	v, err := chromedp.Run(ctx, chromedp.Evaluate[pageView](readView))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// rowsWhere counts a lane's rows that hold.
func rowsWhere(l TraceLane, f func(r []float64) bool) int {
	n := 0
	for _, r := range l.Req {
		if f(r) {
			n++
		}
	}
	return n
}

// The picker lists every shipped trace, the default first shown with its
// reason; picking each loads it with the verdict line of its file and a
// lane per mode, every request drawn by the end and every retried one
// ringed; shared-prefix shows its leaders and followers, noisy-neighbour
// its tenants, ratelimited the bucket.
func TestPagePicksEveryTrace(t *testing.T) {
	st := newStack(t, 8)
	h := New(Options{})
	if err := h.shipped.load(); err != nil {
		t.Fatal(err)
	}
	list := h.shipped.list
	ctx, console := browser(t, 1280, 800)
	if err := chromedp.Do(ctx,
		chromedp.Navigate(st.url+"/ui/"),
		chromedp.WaitVisible(chromedp.CSS(`body[data-state="ready"][data-trace="`+list.Default+`"]`)),
	); err != nil {
		t.Fatalf("the page did not show the default trace %s: %v", list.Default, err)
	}
	if v := scrubTo(t, ctx, 0.25); v.Why != list.Why || v.Why == "" {
		t.Errorf("under the default trace the page says why %q; want %q", v.Why, list.Why)
	}
	options, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("#trace-pick option")].map((o) => o.value)`))
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, ti := range list.Traces {
		want = append(want, ti.Name)
	}
	if !slices.Equal(options, want) {
		t.Errorf("the picker lists %v; want every shipped trace, %v", options, want)
	}
	for _, name := range want {
		v := pick(t, ctx, name, 1)
		if name == PageBurst {
			var burst Trace
			b, _ := static.ReadFile("static/trace-default.json")
			if err := json.Unmarshal(b, &burst); err != nil {
				t.Fatal(err)
			}
			if v.Verdict != burst.Verdict || len(v.Lanes) != 2 || v.Lanes[1].Drawn != burst.Params.Burst {
				t.Errorf("%s: verdict %q, lanes %+v; want %q and two lanes of %d", name, v.Verdict, v.Lanes, burst.Verdict, burst.Params.Burst)
			}
			continue
		}
		tr, _ := mustScenarioTrace(t, name)
		if v.Verdict != tr.Verdict.Line {
			t.Errorf("%s: the page's verdict line %q; the file's %q", name, v.Verdict, tr.Verdict.Line)
		}
		if len(v.Lanes) != len(tr.Lanes) {
			t.Fatalf("%s: %d lanes drawn; want %d", name, len(v.Lanes), len(tr.Lanes))
		}
		if v.Overflow > 0 {
			t.Errorf("%s: the page is %d px wider than the window", name, v.Overflow)
		}
		for i, l := range tr.Lanes {
			got := v.Lanes[i]
			retried := rowsWhere(l, func(r []float64) bool { return r[ColRetries] > 0 })
			if got.Mode != l.Mode || got.Drawn != len(l.Req) || got.Colours["retried"] != retried {
				t.Errorf("%s lane %d: %s with %d dots (%d ringed as retried); want %s with %d (%d retried)",
					name, i, got.Mode, got.Drawn, got.Colours["retried"], l.Mode, len(l.Req), retried)
			}
		}
		switch name {
		case "shared-prefix":
			checkCacheColours(t, v, tr)
		case "noisy-neighbour":
			checkTenantColours(t, v, tr)
		case "ratelimited":
			if !v.BucketVisible || v.BucketLines != len(tr.Lanes) || v.BucketCapacity != tr.Bucket || tr.Bucket == 0 {
				t.Errorf("ratelimited: bucket chart shown %v with %d lines at capacity %d; want %d lines at %d",
					v.BucketVisible, v.BucketLines, v.BucketCapacity, len(tr.Lanes), tr.Bucket)
			}
			// One picture in this test: a capture can take its whole 15 s
			// bound (see shot), and the test picks a dozen traces within
			// the browser's 60 s.
			scrubTo(t, ctx, 0.5)
			shot(t, ctx, "trace-ratelimited.png")
		default:
			if tr.Bucket == 0 && v.BucketVisible {
				t.Errorf("%s: a bucket chart for an upstream without an input-token limit", name)
			}
		}
	}
	console.check(t)
}

// checkCacheColours: coloured by cache role, each lane's leaders and
// followers are the file's, the windowed lane has followers and fewer
// leaders than plain, and the legend names both.
func checkCacheColours(t *testing.T, v pageView, tr *ScenarioTrace) {
	t.Helper()
	if v.ColourBy != "cache" || !slices.Contains(v.Legend, "leader") || !slices.Contains(v.Legend, "follower") {
		t.Errorf("shared-prefix: coloured by %q, legend %v; want cache, with leader and follower", v.ColourBy, v.Legend)
	}
	leaders := map[string]int{}
	for i, l := range tr.Lanes {
		ok := func(role float64) func(r []float64) bool {
			return func(r []float64) bool { return r[ColCache] == role && r[ColOutcome] == 0 }
		}
		wl, wf := rowsWhere(l, ok(1)), rowsWhere(l, ok(2))
		if c := v.Lanes[i].Colours; c["leader"] != wl || c["follower"] != wf {
			t.Errorf("shared-prefix %s: %d leaders and %d followers drawn; the file has %d and %d", l.Mode, c["leader"], c["follower"], wl, wf)
		}
		leaders[l.Mode] = wl
		if l.Mode == "windowed" && wf == 0 {
			t.Errorf("shared-prefix windowed: no followers in the file")
		}
	}
	if leaders["windowed"] >= leaders["plain"] {
		t.Errorf("shared-prefix: %d leaders windowed, %d plain; want fewer windowed", leaders["windowed"], leaders["plain"])
	}
}

// checkTenantColours: coloured by tenant, each lane's dots of each tenant
// are the file's, and the legend and the tenants table name them.
func checkTenantColours(t *testing.T, v pageView, tr *ScenarioTrace) {
	t.Helper()
	if v.ColourBy != "tenant" || v.TenantRows != len(tr.Lanes)*len(tr.Tenants) {
		t.Errorf("noisy-neighbour: coloured by %q, %d tenant rows; want tenant, %d rows", v.ColourBy, v.TenantRows, len(tr.Lanes)*len(tr.Tenants))
	}
	for ti, name := range tr.Tenants {
		if !slices.Contains(v.Legend, "tenant:"+name) {
			t.Errorf("noisy-neighbour: legend %v has no tenant %s", v.Legend, name)
		}
		for i, l := range tr.Lanes {
			n := rowsWhere(l, func(r []float64) bool { return int(r[ColTenant]) == ti && r[ColOutcome] == 0 })
			if got := v.Lanes[i].Colours["tenant-"+name]; got != n || n == 0 {
				t.Errorf("noisy-neighbour %s: %d dots of tenant %s; the file has %d served", l.Mode, got, name, n)
			}
		}
	}
}

// At phone width the page body never scrolls sideways, with the most
// lanes and the widest tables; the tables say they scroll.
func TestPagePhoneWidth(t *testing.T) {
	st := newStack(t, 8)
	ctx, console := browser(t, 390, 844)
	if err := chromedp.Do(ctx,
		chromedp.Navigate(st.url+"/ui/"),
		chromedp.WaitVisible(chromedp.CSS(`body[data-state="ready"]`)),
		chromedp.WaitVisible(chromedp.CSS(`.scrollnote`)),
	); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{DefaultScenario, "ratelimited", "capacity-shift", "noisy-neighbour"} {
		if v := pick(t, ctx, name, 0.3); v.Overflow > 0 {
			t.Errorf("%s at 390 px: the page is %d px wider than the window", name, v.Overflow)
		}
	}
	shot(t, ctx, "trace-noisy-neighbour-390.png")
	console.check(t)
}
