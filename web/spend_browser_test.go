package web

import (
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/sluicehq/sluice/request"
)

// The live view's spend table shows what the tenant spent on the model it
// called, in USD and tokens, once its answer is in.
func TestPageShowsSpend(t *testing.T) {
	st := newStack(t, 2)
	ctx, console := browser(t, 1280, 800)
	openLive(t, ctx, st)
	postMessage(t, st.url, `{"model":"claude-sonnet-4-5","max_tokens":16,"messages":[{"role":"user","content":"what did this cost?"}]}`)
	tenant := request.Tenant(http.Header{"X-Api-Key": {"sk-test"}})
	row := `#live-spend tr[data-tenant="` + tenant + `"][data-model="claude-sonnet-4-5"]`
	if err := chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS(row))); err != nil {
		t.Fatalf("the live view shows no spend row for %s on claude-sonnet-4-5: %v", tenant, err)
	}
	cells, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll('`+row+` td')].map(td => td.textContent)`))
	if err != nil {
		t.Fatal(err)
	}
	usd, err := chromedp.Run(ctx, chromedp.AttributeValue(chromedp.CSS(row), "data-usd"))
	if err != nil {
		t.Fatal(err)
	}
	v, _ := strconv.ParseFloat(usd.Value, 64)
	if len(cells) != 4 || cells[0] != tenant || !strings.HasPrefix(cells[2], "$0.00") || v <= 0 || cells[3] == "0" {
		t.Errorf("spend row %v (data-usd %s); want %s, the model, a cost in dollars above 0 and its tokens", cells, usd.Value, tenant)
	}
	console.check(t)
}
