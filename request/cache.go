package request

import "strings"

// cacheMinimums is the one table of minimum cacheable prefix lengths, in
// tokens, by model family: the entry with the longest prefix of the model
// id wins, and an id no entry matches gets defaultCacheMinimum. Values are
// from the prompt-caching documentation as quoted by its readers (1024,
// 2048 or 4096 by model); the 5.x families are as LiteLLM's table of
// 2026-10 gives them, and families no source names (Opus 4.7, Mythos
// Preview, Haiku 5.5) follow their nearest documented sibling.
var cacheMinimums = []struct {
	prefix string
	tokens int
}{
	{"claude-opus-5", 512}, // Opus 5, Opus 5.5
	{"claude-fable-5", 512},
	{"claude-mythos-5", 512},
	{"claude-sonnet-5", 1024}, // Sonnet 5, Sonnet 5.5
	{"claude-opus-4-8", 1024},
	{"claude-opus-4-7", 4096},
	{"claude-opus-4-6", 4096},
	{"claude-opus-4-5", 4096},
	{"claude-mythos-preview", 4096},
	{"claude-haiku-5", 4096},
	{"claude-haiku-4-5", 4096},
	{"claude-sonnet-4", 1024}, // Sonnet 4, 4.5, 4.6
	{"claude-opus-4", 1024},   // Opus 4, 4.1
	{"claude-3-7-sonnet", 1024},
	{"claude-3-5-haiku", 2048},
	{"claude-3-haiku", 2048},
}

const defaultCacheMinimum = 1024

// CacheMinimum is the documented minimum cacheable prefix of a model, in
// tokens: a prefix shorter than this is not cached at all, and both cache
// counters of its usage are 0. The simulator caches by it, and the
// cache-aware releaser groups only prefixes that reach it.
func CacheMinimum(model string) int {
	best, tokens := 0, defaultCacheMinimum
	for _, m := range cacheMinimums {
		if len(m.prefix) > best && strings.HasPrefix(model, m.prefix) {
			best, tokens = len(m.prefix), m.tokens
		}
	}
	return tokens
}

// CacheModels is the model ids (and id prefixes) CacheMinimum knows by
// name; any other gets the default minimum.
func CacheModels() []string {
	out := make([]string, len(cacheMinimums))
	for i, m := range cacheMinimums {
		out[i] = m.prefix
	}
	return out
}
