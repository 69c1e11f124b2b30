package web

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/sluicehq/sluice/bulk"
)

// The page lists the bulk batch of five requests with its key's hash and
// follows it to the end: five succeeded, none pending.
func TestPageShowsBulkBatches(t *testing.T) {
	st := newBulkStack(t, time.Second)
	ctx, console := browser(t, 1280, 800)
	openLive(t, ctx, st)
	for i := range 5 {
		postAs(t, st.url+"/v1/bulk/messages", fmt.Sprintf(`{"model":"claude-sonnet-4-5","max_tokens":16,"messages":[{"role":"user","content":"bulk %d"}]}`, i), http.StatusAccepted)
	}
	if err := chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS(`#bulk-batches tr[data-count="5"]`))); err != nil {
		t.Fatalf("the page shows no batch of 5: %v", err)
	}
	if err := chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS(`#bulk-batches tr[data-status="ended"][data-succeeded="5"][data-pending="0"]`))); err != nil {
		t.Fatalf("the page did not show the batch ended with 5 succeeded: %v", err)
	}
	bs, err := st.bulk.Batches(t.Context(), 5)
	if err != nil || len(bs) != 1 {
		t.Fatalf("store batches %v, %v; want one", bs, err)
	}
	cells, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("#bulk-batches tr td")].map(td => td.textContent)`))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{bs[0].UpstreamID, bs[0].Key, "5", "5", "0", "0", "ended"}
	if len(cells) != 8 || strings.Join(cells[:7], "|") != strings.Join(want, "|") {
		t.Errorf("batch row %v; want %v and when", cells, want)
	}
	html, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById("live").innerHTML`))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(html, "sk-test") {
		t.Error("the page shows the API key")
	}
	shot(t, ctx, "page-bulk.png")
	console.check(t)
}

// Without the bulk endpoint the API says so and the page too.
func TestPageBulkOff(t *testing.T) {
	st := newStack(t, 2)
	resp, err := http.Get(st.url + "/ui/api/bulk")
	if err != nil {
		t.Fatal(err)
	}
	var u bulkUpdate
	err = json.NewDecoder(resp.Body).Decode(&u)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 || u.Enabled || u.Batches == nil || len(u.Batches) != 0 {
		t.Fatalf("GET /ui/api/bulk: %d %+v %v; want enabled false and no batches", resp.StatusCode, u, err)
	}
	ctx, console := browser(t, 1280, 800)
	openLive(t, ctx, st)
	if err := chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS(`#bulk-status[data-state="off"]`))); err != nil {
		t.Fatalf("the page does not say the bulk endpoint is off: %v", err)
	}
	console.check(t)
}

// countingBatches is a BulkBatches that counts its calls.
type countingBatches struct {
	calls atomic.Int32
	batch bulk.BatchView
}

func (c *countingBatches) Batches(context.Context, int) ([]bulk.BatchView, error) {
	c.calls.Add(1)
	return []bulk.BatchView{c.batch}, nil
}

// The API reads the store at most once a second however often it is
// asked, and shows each batch's pending requests.
func TestBulkAPICaches(t *testing.T) {
	src := &countingBatches{batch: bulk.BatchView{ID: "b1", Key: "abc", Status: "in_progress", Count: 10, Succeeded: 4, Errored: 1, Expired: 2}}
	srv := httptest.NewServer(New(Options{Bulk: src}))
	defer srv.Close()
	for range 5 {
		resp, err := http.Get(srv.URL + "/ui/api/bulk")
		if err != nil {
			t.Fatal(err)
		}
		var u bulkUpdate
		err = json.NewDecoder(resp.Body).Decode(&u)
		resp.Body.Close()
		if err != nil || !u.Enabled || len(u.Batches) != 1 || u.Batches[0].Pending != 3 || u.Batches[0].Key != "abc" {
			t.Fatalf("GET /ui/api/bulk: %+v %v; want the batch with 3 pending", u, err)
		}
	}
	if n := src.calls.Load(); n != 1 {
		t.Errorf("%d store reads for 5 quick GETs; want 1", n)
	}
}
