// Package catalog is the list of Claude models as the API's GET
// /v1/models answers it (ids, display names, release dates, newest
// first) and that endpoint's page envelope. The simulator serves it, and
// sluice serves the part of it its backends carry when no first-party
// key can answer a model list (model discovery for Claude Code and the
// SDKs on a cloud-only sluice).
package catalog

import (
	"net/http"
	"strconv"
	"strings"
	"unicode"

	"github.com/sluicehq/sluice/apierror"
)

// Model is one entry of the list, in the API's shape.
type Model struct {
	Type        string `json:"type"` // always "model"
	ID          string `json:"id"`
	DisplayName string `json:"display_name"`
	CreatedAt   string `json:"created_at"` // RFC 3339
}

// Models is the catalogue, newest first as the API lists it: the ids of
// the Go SDK's model constants (v1.84, v2.15), plus Haiku 3.5 kept for
// older tests and docs. created_at is the documented release date where
// the docs give one (Opus 4.6, 4.7, 4.8, Fable 5, Mythos 5, Opus 5, and
// the 4.5 models); the others are approximate, in the SDK's order.
var Models = []Model{
	{"model", "claude-fable-5-2", "Claude Fable 5.2", "2026-11-10T00:00:00Z"},
	{"model", "claude-mythos-5-2", "Claude Mythos 5.2", "2026-11-10T00:00:00Z"},
	{"model", "claude-haiku-5-5", "Claude Haiku 5.5", "2026-10-20T00:00:00Z"},
	{"model", "claude-sonnet-5-5", "Claude Sonnet 5.5", "2026-10-20T00:00:00Z"},
	{"model", "claude-opus-5-5", "Claude Opus 5.5", "2026-10-20T00:00:00Z"},
	{"model", "claude-fable-5-1", "Claude Fable 5.1", "2026-09-15T00:00:00Z"},
	{"model", "claude-mythos-5-1", "Claude Mythos 5.1", "2026-09-15T00:00:00Z"},
	{"model", "claude-opus-5", "Claude Opus 5", "2026-07-24T00:00:00Z"},
	{"model", "claude-sonnet-5", "Claude Sonnet 5", "2026-07-01T00:00:00Z"},
	{"model", "claude-fable-5", "Claude Fable 5", "2026-06-09T00:00:00Z"},
	{"model", "claude-mythos-5", "Claude Mythos 5", "2026-06-09T00:00:00Z"},
	{"model", "claude-opus-4-8", "Claude Opus 4.8", "2026-05-28T00:00:00Z"},
	{"model", "claude-opus-4-7", "Claude Opus 4.7", "2026-04-16T00:00:00Z"},
	{"model", "claude-mythos-preview", "Claude Mythos Preview", "2026-04-07T00:00:00Z"},
	{"model", "claude-sonnet-4-6", "Claude Sonnet 4.6", "2026-02-17T00:00:00Z"},
	{"model", "claude-opus-4-6", "Claude Opus 4.6", "2026-02-05T00:00:00Z"},
	{"model", "claude-opus-4-5-20251101", "Claude Opus 4.5", "2025-11-24T00:00:00Z"},
	{"model", "claude-opus-4-5", "Claude Opus 4.5", "2025-11-24T00:00:00Z"},
	{"model", "claude-haiku-4-5-20251001", "Claude Haiku 4.5", "2025-10-15T00:00:00Z"},
	{"model", "claude-haiku-4-5", "Claude Haiku 4.5", "2025-10-15T00:00:00Z"},
	{"model", "claude-sonnet-4-5-20250929", "Claude Sonnet 4.5", "2025-09-29T00:00:00Z"},
	{"model", "claude-sonnet-4-5", "Claude Sonnet 4.5", "2025-09-29T00:00:00Z"},
	{"model", "claude-opus-4-1", "Claude Opus 4.1", "2025-08-05T00:00:00Z"},
	{"model", "claude-3-5-haiku-20241022", "Claude Haiku 3.5", "2024-10-22T00:00:00Z"},
}

// Of is the catalogue's entry for id, or one made from the id itself for
// a model the catalogue does not list (a cloud table's older or newer
// id): its display name spelled from the id ("claude-opus-4-1-20250805"
// is "Claude Opus 4.1"), its date the id's own when it ends in one, else
// the zero time, which the API's schema allows and clients ignore.
func Of(id string) Model {
	for _, m := range Models {
		if m.ID == id {
			return m
		}
	}
	name, created := id, "1970-01-01T00:00:00Z"
	if i := strings.LastIndexByte(id, '-'); i > 0 && isDate(id[i+1:]) {
		d := id[i+1:]
		name, created = id[:i], d[:4]+"-"+d[4:6]+"-"+d[6:]+"T00:00:00Z"
	}
	return Model{Type: "model", ID: id, DisplayName: displayName(name), CreatedAt: created}
}

func isDate(s string) bool {
	if len(s) != 8 {
		return false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// displayName spells an undated id as the API's names read: words
// capitalised, a run of numbers joined by dots, numbers after the words
// ("claude-3-7-sonnet" is "Claude Sonnet 3.7").
func displayName(id string) string {
	var words, nums []string
	for _, part := range strings.Split(id, "-") {
		if part == "" {
			continue
		}
		if unicode.IsDigit(rune(part[0])) {
			nums = append(nums, part)
			continue
		}
		words = append(words, strings.ToUpper(part[:1])+part[1:])
	}
	if len(nums) > 0 {
		words = append(words, strings.Join(nums, "."))
	}
	return strings.Join(words, " ")
}

// Page is the API's list envelope.
type Page[T any] struct {
	Data    []T     `json:"data"`
	HasMore bool    `json:"has_more"`
	FirstID *string `json:"first_id"`
	LastID  *string `json:"last_id"`
}

// Paginate cuts a newest-first list by the API's limit, after_id and
// before_id query parameters; a bad limit is a 400 saying so.
func Paginate[T any](r *http.Request, items []T, id func(T) string) (Page[T], *apierror.Error) {
	q := r.URL.Query()
	limit := 20
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1000 {
			return Page[T]{}, apierror.New(http.StatusBadRequest, "invalid_request_error", "limit: must be an integer from 1 to 1000")
		}
		limit = n
	}
	lo, hi := 0, len(items)
	if after := q.Get("after_id"); after != "" {
		lo = len(items)
		for i, it := range items {
			if id(it) == after {
				lo = i + 1
			}
		}
	}
	if before := q.Get("before_id"); before != "" {
		hi = 0
		for i, it := range items {
			if id(it) == before {
				hi = i
			}
		}
		// before_id pages backwards: the items just before the cursor.
		if hi > lo && hi-lo > limit {
			lo = hi - limit
		}
	}
	if hi < lo {
		hi = lo
	}
	p := Page[T]{Data: items[lo:hi]}
	if len(p.Data) > limit {
		p.Data, p.HasMore = p.Data[:limit], true
	} else if q.Get("before_id") != "" && lo > 0 {
		p.HasMore = true
	}
	if len(p.Data) > 0 {
		first, last := id(p.Data[0]), id(p.Data[len(p.Data)-1])
		p.FirstID, p.LastID = &first, &last
	}
	if p.Data == nil {
		p.Data = []T{}
	}
	return p, nil
}
