package request

import "testing"

// The longest matching family wins, dated ids follow their family, and an
// unknown id gets the default.
func TestCacheMinimum(t *testing.T) {
	for model, want := range map[string]int{
		"claude-sonnet-4-5":          1024,
		"claude-sonnet-4-5-20250929": 1024,
		"claude-haiku-4-5":           4096,
		"claude-3-5-haiku-20241022":  2048,
		"claude-opus-4-1":            1024,
		"claude-opus-4-6":            4096,
		"claude-opus-5":              512,
		"someone-elses-model":        1024,
	} {
		if got := CacheMinimum(model); got != want {
			t.Errorf("CacheMinimum(%q) = %d; want %d", model, got, want)
		}
	}
}
