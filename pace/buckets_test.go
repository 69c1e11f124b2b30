package pace

import (
	"net/http"
	"strconv"
	"testing"
	"time"
)

var t0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

// headers is a full set of rate-limit headers for the input-token limit
// and the requests limit, as the API sends them.
func headers(reqLimit, reqRem, inLimit, inRem int, now time.Time) http.Header {
	h := http.Header{}
	set := func(kind string, limit, rem int) {
		h.Set("anthropic-ratelimit-"+kind+"-limit", strconv.Itoa(limit))
		h.Set("anthropic-ratelimit-"+kind+"-remaining", strconv.Itoa(rem))
		h.Set("anthropic-ratelimit-"+kind+"-reset", now.Add(time.Duration(float64(limit-rem)/float64(limit)*float64(time.Minute))).Format(time.RFC3339))
	}
	set("requests", reqLimit, reqRem)
	set("input-tokens", inLimit, inRem)
	return h
}

func level(t *testing.T, bs *Buckets, key string, kind Kind, now time.Time) float64 {
	t.Helper()
	for _, l := range bs.Levels(now) {
		if l.Key == key && l.Kind == kind {
			return l.Level
		}
	}
	t.Fatalf("no %s bucket for %q", kind, key)
	return 0
}

func TestAnUnknownKeyTakesAnything(t *testing.T) {
	var bs Buckets
	if _, ok, _ := bs.Take("k", Cost{Input: 1e9}, t0); !ok {
		t.Fatal("a key with no limits known yet was held")
	}
}

func TestBucketsAreLearnedFromTheFullHeaderSet(t *testing.T) {
	var bs Buckets
	d, _, _ := bs.Take("k", Cost{Input: 5000}, t0)
	bs.Observe("k", d, 200, headers(50, 49, 60000, 55000, t0), t0)
	if got := level(t, &bs, "k", InputTokens, t0); got != 55000 {
		// 55,000 is rounded to thousands: the best first guess.
		t.Errorf("input level %v; want 55000", got)
	}
	if got := level(t, &bs, "k", Requests, t0); got != 49 {
		t.Errorf("requests level %v; want exactly 49", got)
	}
	// Refilled continuously at the limit per minute: 10 s refills 10,000,
	// up to the limit.
	if got := level(t, &bs, "k", InputTokens, t0.Add(10*time.Second)); got != 60000 {
		t.Errorf("input level after 10 s %v; want the limit, 60000", got)
	}
}

func TestTheHeadFitsAfterTheRefillOfItsShortfallNotAtTheReset(t *testing.T) {
	var bs Buckets
	bs.Observe("k", Debit{}, 200, headers(1000, 1000, 60000, 0, t0), t0) // reads empty
	_, ok, at := bs.Take("k", Cost{Input: 10000}, t0)
	if ok {
		t.Fatal("a cost of 10,000 fitted in an empty bucket")
	}
	// 10,000 short at 1,000 a second: 10 s, where the reset header says
	// 60 s.
	if want := t0.Add(10 * time.Second); !at.Equal(want) {
		t.Errorf("fits at %v; want %v", at.Sub(t0), want.Sub(t0))
	}
	if _, ok, _ := bs.Take("k", Cost{Input: 10000}, at); !ok {
		t.Errorf("did not fit at the time Take gave")
	}
}

func TestARoundedZeroDoesNotHideWhatTheLocalEstimateKnows(t *testing.T) {
	var bs Buckets
	// A limit of 1,000 input tokens a minute, seen full; a request of 400
	// leaves 600, which the header rounds to 1,000, and one of 200 leaves
	// 400, which it rounds to 0: the estimate keeps 400, and the next
	// request of 300 goes at once (the reset header would hold it 36 s).
	bs.Observe("k", Debit{}, 200, headers(1000, 1000, 1000, 1000, t0), t0)
	d1, _, _ := bs.Take("k", Cost{Input: 400}, t0)
	bs.Observe("k", d1, 200, headers(1000, 999, 1000, 1000, t0), t0)
	d2, _, _ := bs.Take("k", Cost{Input: 200}, t0)
	bs.Observe("k", d2, 200, headers(1000, 998, 1000, 0, t0), t0)
	if _, ok, _ := bs.Take("k", Cost{Input: 300}, t0); !ok {
		t.Errorf("a request of 300 tokens was held with about 400 left (estimate %v)", level(t, &bs, "k", InputTokens, t0))
	}
}

func TestDebitsAreCorrectedByUsageAndByLaterHeaders(t *testing.T) {
	var bs Buckets
	bs.Observe("k", Debit{}, 200, headers(1000, 1000, 60000, 60000, t0), t0)
	d, ok, _ := bs.Take("k", Cost{Input: 20000, Output: 4096}, t0)
	if !ok {
		t.Fatal("held")
	}
	if got := level(t, &bs, "k", InputTokens, t0); got != 40000 {
		t.Fatalf("after the debit %v; want 40000", got)
	}
	// The answer says only 8,000 input tokens counted (the rest were cache
	// reads): 12,000 come back.
	bs.Correct(d, Cost{Input: 8000, Output: 100}, t0)
	if got := level(t, &bs, "k", InputTokens, t0); got != 52000 {
		t.Errorf("after the correction %v; want 52000", got)
	}
	// Another client of the organisation spent 30,000 meanwhile: the
	// headers say so, and the estimate comes down to them.
	d2, _, _ := bs.Take("k", Cost{Input: 1000}, t0)
	bs.Observe("k", d2, 200, headers(1000, 990, 60000, 21000, t0), t0)
	if got := level(t, &bs, "k", InputTokens, t0); got != 21500 {
		t.Errorf("after headers below the estimate %v; want 21500", got)
	}
}

// How an answer's headers bound the estimate (what they cannot have seen,
// that they never raise it, a refusal's own debit) is checked by
// pacetest, which the shared buckets run too: TestConformance.

func TestARefundGivesTheRequestBackToo(t *testing.T) {
	var bs Buckets
	bs.Observe("k", Debit{}, 200, headers(10, 10, 60000, 60000, t0), t0)
	d, _, _ := bs.Take("k", Cost{Input: 1000}, t0)
	bs.Refund(d, t0)
	if got := level(t, &bs, "k", Requests, t0); got != 10 {
		t.Errorf("requests %v after a refund; want 10", got)
	}
	if got := level(t, &bs, "k", InputTokens, t0); got != 60000 {
		t.Errorf("input %v after a refund; want 60000", got)
	}
}

func TestA429HoldsItsKeyAloneForItsRetryAfter(t *testing.T) {
	var bs Buckets
	h := http.Header{"Retry-After": {"7"}}
	bs.Observe("a", Debit{}, http.StatusTooManyRequests, h, t0)
	if _, ok, at := bs.Take("a", Cost{Input: 1}, t0); ok || !at.Equal(t0.Add(7*time.Second)) {
		t.Errorf("key a: taken %v, fits at %v; want held 7 s", ok, at.Sub(t0))
	}
	if _, ok, _ := bs.Take("b", Cost{Input: 1}, t0); !ok {
		t.Error("key b was held by key a's 429")
	}
	// A far-off retry-after is capped.
	bs.Observe("a", Debit{}, http.StatusTooManyRequests, http.Header{"Retry-After": {"3600"}}, t0)
	if _, _, at := bs.Take("a", Cost{Input: 1}, t0); at.After(t0.Add(time.Minute)) {
		t.Errorf("held for %v; want at most a minute", at.Sub(t0))
	}
}

func TestAPartialHeaderSetWithoutLimitsHoldsAnEmptyLimitUntilItsReset(t *testing.T) {
	var bs Buckets
	reset := t0.Add(5 * time.Second)
	h := http.Header{}
	h.Set("anthropic-ratelimit-requests-remaining", "0")
	h.Set("anthropic-ratelimit-requests-reset", reset.Format(time.RFC3339))
	bs.Observe("k", Debit{}, 200, h, t0)
	if _, ok, at := bs.Take("k", Cost{}, t0); ok || !at.Equal(reset) {
		t.Errorf("taken %v, at %v; want held until the reset", ok, at)
	}
	h.Set("anthropic-ratelimit-requests-reset", "in five seconds") // not RFC 3339: ignored
	var other Buckets
	other.Observe("k", Debit{}, 200, h, t0)
	if _, ok, _ := other.Take("k", Cost{}, t0); !ok {
		t.Error("held on a reset that is not an RFC 3339 time")
	}
}

func TestTheTokensLimitCountsOnlyWhenNeitherInputNorOutputIsReported(t *testing.T) {
	var bs Buckets
	h := http.Header{}
	h.Set("anthropic-ratelimit-tokens-limit", "10000")
	h.Set("anthropic-ratelimit-tokens-remaining", "3000")
	bs.Observe("k", Debit{}, 200, h, t0)
	if _, ok, _ := bs.Take("k", Cost{Input: 2000, Output: 2000}, t0); ok {
		t.Error("4,000 tokens fitted in a tokens bucket of 3,500")
	}
	h.Set("anthropic-ratelimit-input-tokens-limit", "10000")
	h.Set("anthropic-ratelimit-input-tokens-remaining", "10000")
	bs.Observe("k", Debit{}, 200, h, t0)
	if _, ok, _ := bs.Take("k", Cost{Input: 2000, Output: 2000}, t0); !ok {
		t.Error("with the input limit reported, the tokens limit still held")
	}
}

func TestKeysAreBounded(t *testing.T) {
	bs := Buckets{MaxKeys: 2}
	for _, k := range []string{"a", "b", "c"} {
		bs.Observe(k, Debit{}, 200, headers(10, 10, 1000, 1000, t0), t0)
	}
	if n := len(bs.Levels(t0)); n != 4 {
		t.Errorf("%d buckets known; want 2 keys × 2 limits", n)
	}
}

// A bucket first seen in an answer starts at what the headers say
// remains less what was let go after that answer's own debit while the
// limit was unknown: the headers cannot have seen those.
func TestFirstSeenCountsWhatWentSince(t *testing.T) {
	var bs Buckets
	first, _, _ := bs.Take("k", Cost{Input: 10}, t0)
	for range 5 {
		bs.Take("k", Cost{Input: 10}, t0)
	}
	bs.Observe("k", first, 200, headers(10, 9, 100000, 100000, t0), t0)
	if got := level(t, &bs, "k", Requests, t0); got != 4 {
		t.Fatalf("requests level %v; want 9 remaining less the 5 let go since = 4", got)
	}
}

// SetShare models a share of each limit: a replica's part of a fleet's.
func TestSetShare(t *testing.T) {
	var bs Buckets
	bs.SetShare(0.5)
	bs.Observe("k", Debit{}, 200, headers(10, 10, 100000, 100000, t0), t0)
	got := 0
	for range 10 {
		if _, ok, _ := bs.Take("k", Cost{Input: 1}, t0); ok {
			got++
		}
	}
	if got != 5 {
		t.Fatalf("took %d of a limit of 10 at a share of 1/2; want 5", got)
	}
}
