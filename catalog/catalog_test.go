package catalog

import (
	"net/http/httptest"
	"testing"
)

func TestOfSpellsUnlistedIDs(t *testing.T) {
	for id, want := range map[string]Model{
		"claude-sonnet-4-5":          {"model", "claude-sonnet-4-5", "Claude Sonnet 4.5", "2025-09-29T00:00:00Z"},
		"claude-3-7-sonnet-20250219": {"model", "claude-3-7-sonnet-20250219", "Claude Sonnet 3.7", "2025-02-19T00:00:00Z"},
		"claude-opus-4-1-20250805":   {"model", "claude-opus-4-1-20250805", "Claude Opus 4.1", "2025-08-05T00:00:00Z"},
		"my-claude-custom":           {"model", "my-claude-custom", "My Claude Custom", "1970-01-01T00:00:00Z"},
	} {
		if got := Of(id); got != want {
			t.Errorf("Of(%q) = %+v; want %+v", id, got, want)
		}
	}
}

func TestPaginateWalksTheList(t *testing.T) {
	id := func(m Model) string { return m.ID }
	var seen []string
	after := ""
	for range len(Models) {
		p, err := Paginate(httptest.NewRequest("GET", "/v1/models?limit=7&after_id="+after, nil), Models, id)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range p.Data {
			seen = append(seen, m.ID)
		}
		if !p.HasMore {
			break
		}
		after = *p.LastID
	}
	if len(seen) != len(Models) || seen[0] != Models[0].ID || seen[len(seen)-1] != Models[len(Models)-1].ID {
		t.Fatalf("paging by 7 saw %d of %d: %v", len(seen), len(Models), seen)
	}
	if _, err := Paginate(httptest.NewRequest("GET", "/v1/models?limit=0", nil), Models, id); err == nil || err.Status != 400 {
		t.Fatalf("limit=0: %v; want a 400", err)
	}
}
