package proxy

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice/price"
	"github.com/sluicehq/sluice/request"
	"github.com/sluicehq/sluice/sim"
)

// spendBody is a request of model whose system prompt, sharedSystem (about
// 2,400 tokens), is marked for caching with ttl, and whose question is q.
func spendBody(model, ttl, q string, stream bool) string {
	return fmt.Sprintf(`{"model":%q,"max_tokens":64,"stream":%v,`+
		`"system":[{"type":"text","text":%q,"cache_control":{"type":"ephemeral","ttl":%q}}],`+
		`"messages":[{"role":"user","content":%q}]}`, model, stream, sharedSystem, ttl, q)
}

// spendSeries sums /metrics' series of name by their kind label, over
// every tenant, key and model, and lists the keys they name.
func spendSeries(t *testing.T, text, name string) (byKind map[string]float64, keys map[string]bool) {
	t.Helper()
	byKind, keys = map[string]float64{}, map[string]bool{}
	for _, line := range strings.Split(text, "\n") {
		labels, ok := strings.CutPrefix(line, name+"{")
		if !ok {
			continue
		}
		i := strings.LastIndex(labels, "} ")
		v, err := strconv.ParseFloat(labels[i+2:], 64)
		if err != nil {
			t.Fatalf("%s: %v", line, err)
		}
		for _, l := range strings.Split(labels[:i], ",") {
			k, val, _ := strings.Cut(l, "=")
			val, _ = strconv.Unquote(val)
			switch k {
			case "kind":
				byKind[val] += v
			case "key":
				keys[val] = true
			}
		}
	}
	return byKind, keys
}

// Spend counted end to end: JSON and streamed answers of several models,
// cache writes of both TTLs and cache reads, through sluice in front of
// the simulator on both paths. sluice_spend_usd_total is what the
// simulator's own cost counter, priced by the same table, says it served,
// to a billionth of it (and so to the cent); the tokens by kind are the
// simulator's.
func TestSpendMatchesSimulator(t *testing.T) {
	bothModes(t, func(t *testing.T, windowed bool) {
		synctest.Test(t, func(t *testing.T) {
			s := sim.New(sim.Config{TTFT: 50 * time.Millisecond, PerToken: time.Millisecond})
			t.Cleanup(s.Close)
			rig := newBubbleRig(t, windowed, s.ServeHTTP)
			for _, c := range []struct {
				model, ttl string
				stream     bool
			}{
				{"claude-sonnet-4-5", "5m", false}, // writes the 5-minute entry
				{"claude-sonnet-4-5", "5m", true},  // reads it
				{"claude-opus-4-1", "1h", true},    // writes an hour's entry
				{"claude-opus-4-1", "1h", false},   // reads it
				{"claude-opus-5-5", "5m", true},
				{"claude-haiku-4-5", "5m", false}, // under Haiku 4.5's minimum: nothing cached
				{"claude-fable-5-2", "1h", false},
			} {
				resp, err := rig.post(t, context.Background(), spendBody(c.model, c.ttl, "what next?", c.stream))
				if err != nil {
					t.Fatal(err)
				}
				body := readAll(t, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("%s: status %d: %s", c.model, resp.StatusCode, body)
				}
			}
			synctest.Wait()
			text := scrape(t, rig)
			usd, keys := spendSeries(t, text, "sluice_spend_usd_total")
			toks, _ := spendSeries(t, text, "sluice_spend_tokens_total")
			st := s.Stats()
			var total float64
			for _, v := range usd {
				total += v
			}
			if math.Abs(total-st.CostUSD) > 1e-9*st.CostUSD || math.Round(total*100) != math.Round(st.CostUSD*100) || total == 0 {
				t.Errorf("sluice counted $%.9f, the simulator served $%.9f", total, st.CostUSD)
			}
			if toks["input"] != float64(st.Tokens.Input) || toks["output"] != float64(st.Tokens.Output) ||
				toks["cache_write_5m"]+toks["cache_write_1h"] != float64(st.Tokens.CacheCreation) || toks["cache_read"] != float64(st.Tokens.CacheRead) {
				t.Errorf("tokens by kind %v; the simulator's %+v", toks, st.Tokens)
			}
			for _, kind := range []string{"cache_write_5m", "cache_write_1h", "cache_read"} {
				if usd[kind] <= 0 {
					t.Errorf("no %s spend: %v", kind, usd)
				}
			}
			want := request.Tenant(http.Header{"X-Api-Key": {"sk-test"}})
			if len(keys) != 1 || !keys[want] {
				t.Errorf("keys %v; want only the client's key's short hash %s", keys, want)
			}
		})
	})
}

// A stream whose client leaves before the upstream's final usage is
// charged for the input message_start reported and for its output
// estimated from the deltas relayed, never more than the request's
// max_tokens (64: the upstream cannot have generated more), and its access
// line and metrics say the cost was estimated.
func TestSpendCutStreamEstimated(t *testing.T) {
	for _, c := range []struct {
		deltas int   // of 25 tokens' text each
		output int64 // charged
	}{
		{2, 50},
		{4, 64}, // 100 estimated, past max_tokens
	} {
		t.Run(fmt.Sprint(c.deltas, "deltas"), func(t *testing.T) { testSpendCutStream(t, c.deltas, c.output) })
	}
}

func testSpendCutStream(t *testing.T, deltas int, output int64) {
	synctest.Test(t, func(t *testing.T) {
		text := strings.Repeat("abcd", 25) // 100 bytes: 25 tokens at four bytes a token
		upstream := func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, sseEvents[0]) // message_start: 25 input tokens, 1 output
			io.WriteString(w, sseEvents[1])
			for range deltas {
				fmt.Fprintf(w, "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":%q}}\n\n", text)
			}
			w.(http.Flusher).Flush()
			<-r.Context().Done() // the rest never comes: the client leaves
		}
		rig := newBubbleRig(t, false, upstream)
		var log strings.Builder
		rig.proxy.log = slog.New(slog.NewTextHandler(&syncWriter{w: &log}, nil))
		ctx, cancel := context.WithCancel(context.Background())
		resp, err := rig.post(t, ctx, streamRequestJSON)
		if err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 1)
		if _, err := resp.Body.Read(buf); err != nil {
			t.Fatal(err)
		}
		synctest.Wait() // every delta relayed
		cancel()
		resp.Body.Close()
		synctest.Wait()
		c := price.Default().Cost("claude-sonnet-4-5", price.Usage{Input: 25, Output: output}, false)
		key := request.Tenant(http.Header{"X-Api-Key": {"sk-test"}}) // TENANT_FROM=key: the tenant is the key too
		wantMetrics(t, rig,
			fmt.Sprintf(`sluice_spend_tokens_total{key="%s",kind="output",model="claude-sonnet-4-5",tenant="%[1]s"} %d`, key, output),
			fmt.Sprintf(`sluice_spend_estimated_usd_total{key="%s",model="claude-sonnet-4-5",tenant="%[1]s"} %v`, key, c.Total()))
		if line := log.String(); !strings.Contains(line, "cost=estimated") || !strings.Contains(line, fmt.Sprintf("cost_usd=%v", c.Total())) {
			t.Errorf("access line %q; want cost=estimated, cost_usd=%v", line, c.Total())
		}
	})
}

// An answer of a model the table does not know is counted in tokens, not
// in USD: the access line says cost=unknown, and the unpriced tokens have
// a series of their own.
func TestSpendUnknownModel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		upstream := func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, strings.Replace(messageJSON, "claude-sonnet-4-5", "gpt-4o", 1))
		}
		rig := newBubbleRig(t, false, upstream)
		var log strings.Builder
		rig.proxy.log = slog.New(slog.NewTextHandler(&syncWriter{w: &log}, nil))
		resp, err := rig.post(t, context.Background(), requestJSON)
		if err != nil {
			t.Fatal(err)
		}
		readAll(t, resp.Body)
		resp.Body.Close()
		synctest.Wait()
		text := scrape(t, rig)
		if usd, _ := spendSeries(t, text, "sluice_spend_usd_total"); len(usd) != 0 {
			t.Errorf("USD counted for a model of no price: %v", usd)
		}
		if toks, _ := spendSeries(t, text, "sluice_spend_tokens_total"); toks["input"] != 12 || toks["output"] != 4 {
			t.Errorf("tokens %v; want 12 in, 4 out", toks)
		}
		if !strings.Contains(text, `sluice_spend_unpriced_tokens_total{key="`) || !strings.Contains(log.String(), "cost=unknown") {
			t.Errorf("no unpriced series, or access line %q without cost=unknown", log.String())
		}
	})
}

// An upstream that reports a negative count (a broken or hostile one: the
// API never does) is charged nothing for it: the spend series are
// counters, and a negative add would run one backwards (rate() reads
// that as a reset), credit the tenant and make the access line's cost
// negative. The counts that are whole are still charged.
func TestSpendNegativeUsageNotCounted(t *testing.T) {
	bothModes(t, func(t *testing.T, windowed bool) {
		synctest.Test(t, func(t *testing.T) {
			upstream := func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				io.WriteString(w, strings.Replace(messageJSON, `"input_tokens":12,"cache_creation_input_tokens":0,"cache_read_input_tokens":0`,
					`"input_tokens":-1000000,"cache_creation_input_tokens":-5000,"cache_read_input_tokens":-7,"cache_creation":{"ephemeral_1h_input_tokens":-9}`, 1))
			}
			rig := newBubbleRig(t, windowed, upstream)
			log := rig.logs()
			rig.answered(t, requestJSON)
			text := scrape(t, rig)
			for _, name := range []string{"sluice_spend_usd_total", "sluice_spend_tokens_total"} {
				byKind, _ := spendSeries(t, text, name)
				for kind, v := range byKind {
					if v < 0 || math.IsNaN(v) {
						t.Errorf("%s{kind=%q} = %v; want no negative count", name, kind, v)
					}
				}
			}
			c := price.Default().Cost("claude-sonnet-4-5", price.Usage{Output: 4}, false)
			if line := log.String(); !strings.Contains(line, fmt.Sprintf("cost_usd=%v", c.Total())) {
				t.Errorf("access line %q; want cost_usd=%v, the output alone", line, c.Total())
			}
			for _, ts := range rig.proxy.Tenants() {
				if ts.Tokens < 0 {
					t.Errorf("tenant %s has %d tokens; want none taken off", ts.Tenant, ts.Tokens)
				}
			}
		})
	})
}

// An upstream that reports an absurd count (past any context window) has
// it held to price.MaxTokens: two answers of the largest int64 summed in
// the ledger's int64 wrapped sluice_spend_tokens_total negative, and the
// tenant's tokens with it.
func TestSpendHugeUsageNeverWraps(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		upstream := func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, strings.Replace(messageJSON, `"input_tokens":12`, `"input_tokens":9223372036854775807`, 1))
		}
		rig := newBubbleRig(t, true, upstream)
		for range 2 {
			rig.answered(t, requestJSON)
		}
		text := scrape(t, rig)
		toks, _ := spendSeries(t, text, "sluice_spend_tokens_total")
		if toks["input"] != 2*price.MaxTokens {
			t.Errorf("input tokens %v; want each answer's held to %d", toks["input"], price.MaxTokens)
		}
		for _, ts := range rig.proxy.Tenants() {
			if ts.Tokens < 0 {
				t.Errorf("tenant %s has %d tokens; want no wrap", ts.Tenant, ts.Tokens)
			}
		}
	})
}
