package web

import (
	"net/url"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/sluicehq/sluice/config"
)

// The live view's backends table shows each backend key by name, never
// the key, with the requests routed to it; without backends it is hidden.
func TestPageShowsBackends(t *testing.T) {
	const secret = "sk-ant-page-test-SECRET"
	t.Setenv("SLUICE_TEST_PAGE_KEY", secret)
	st := newStackWith(t, 2, func(c *config.Config) {
		u, _ := url.Parse(c.UpstreamURL.String())
		c.Backends = []config.Backend{{Name: "primary", Kind: "anthropic", URL: u, Keys: []string{"env:SLUICE_TEST_PAGE_KEY"}, MaxConcurrency: 3}}
	})
	ctx, console := browser(t, 1280, 800)
	openLive(t, ctx, st)
	postMessage(t, st.url, `{"model":"claude-sonnet-4-5","max_tokens":16,"messages":[{"role":"user","content":"which key?"}]}`)
	// Routed is counted as the request is routed, pending given back as
	// it ends: the row the page settles on has both.
	row := `#live-backends tr[data-key="primary/1"][data-routed="1"][data-pending="0"]`
	if err := chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS(row))); err != nil {
		t.Fatalf("the live view shows no backends row for primary/1 with one request routed and done: %v", err)
	}
	cells, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll('`+row+` td')].map(td => td.textContent)`))
	if err != nil {
		t.Fatal(err)
	}
	if len(cells) != 10 || cells[0] != "primary/1" || cells[1] != "0 / 3" || cells[2] != "tried" {
		t.Errorf("backends row %v; want primary/1, 0 / 3, tried, ...", cells)
	}
	html, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.documentElement.outerHTML`))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(html, secret) {
		t.Error("the page holds the backend's key")
	}
	console.check(t)
}

// Without backends the section stays hidden.
func TestPageHidesBackendsWithoutThem(t *testing.T) {
	st := newStack(t, 2)
	ctx, console := browser(t, 1280, 800)
	openLive(t, ctx, st)
	postMessage(t, st.url, `{"model":"claude-sonnet-4-5","max_tokens":16,"messages":[{"role":"user","content":"hi"}]}`)
	if err := chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS(`#live-spend tr[data-model="claude-sonnet-4-5"]`))); err != nil {
		t.Fatal(err)
	}
	hidden, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.getElementById("live-backends-section").hidden`))
	if err != nil || !hidden {
		t.Errorf("backends section hidden = %v (%v); want hidden", hidden, err)
	}
	console.check(t)
}
